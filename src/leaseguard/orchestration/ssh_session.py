"""One host's guard session: its lookups, and the database through a tunnel to the host
(apart from orchestration.session, so that `leaseguard check` never imports Fabric)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, closing, contextmanager
from typing import TYPE_CHECKING, Any

from psycopg.conninfo import make_conninfo

from leaseguard.adapters import db, ssh
from leaseguard.adapters.host_lookup import look_up_host
from leaseguard.adapters.runtime import Runner
from leaseguard.core.contract import Contract
from leaseguard.core.dsn import reject_hostaddr
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError
from leaseguard.orchestration.session import Conn, GuardSession

if TYPE_CHECKING:
    from fabric import Connection

# A database path: the conninfo to connect with, and the tunnel it goes through (or None).
Path = AbstractContextManager[tuple[str, ssh.DatabaseTunnel | None]]


@contextmanager
def tunnelled(
    connection: Connection, conninfo: str, address: ssh.DatabaseAddress, *, probe: bool = True
) -> Iterator[tuple[str, ssh.DatabaseTunnel]]:
    """`conninfo` pointed at a tunnel to `address` over `connection` (the database needs no
    exposed port), and the tunnel; the connection and its jump hosts closed on every path."""
    with closing(connection):
        reject_hostaddr(conninfo)
        with ssh.forwarded(connection, address, probe=probe) as tunnel:
            yield make_conninfo(conninfo, host="127.0.0.1", port=str(tunnel.port)), tunnel


@contextmanager
def host_session(
    contract: Contract, runner: Runner, path: Path, *, connect: bool = True, **given: Any
) -> Iterator[GuardSession]:
    """A host's session: its lookups run on a thread while `path` opens and, with `connect`,
    the guard's connection opens through it. Failures are raised in the order of the steps:
    the path's, the lookups', the connection's."""
    with ThreadPoolExecutor(1, thread_name_prefix="leaseguard-lookup") as thread:
        lookup = thread.submit(look_up_host, contract, runner, **given)
        with path as (conninfo, tunnel):
            early: Conn | LeaseguardError | None = None
            try:
                early = db.connect(conninfo, contract.connect_timeout_s) if connect else None
            except DatabaseUnavailable as exc:  # the tunnel's cause first, raised in turn
                early = (tunnel.failure() if tunnel is not None else None) or exc
            except LeaseguardError as exc:
                early = exc
            try:
                looked_up = lookup.result()
            except BaseException:
                if early is not None and not isinstance(early, LeaseguardError):
                    early.close()
                raise
            if isinstance(early, LeaseguardError):
                raise early
            facts, clock = looked_up.facts, looked_up.clock
            with closing(
                GuardSession(contract, conninfo, facts, runner, tunnel, host_minus_here=clock)
            ) as session:
                if early is not None:
                    session.adopt(early)
                yield session


@contextmanager
def ssh_session(
    connection: Connection,
    contract: Contract,
    conninfo: str,
    address: ssh.DatabaseAddress,
    *,
    connect: bool = False,
    **given: Any,
) -> Iterator[GuardSession]:
    """A host's session over one Fabric connection carrying its lookups and its tunnel
    (opened first, so that the lookups' thread and the tunnel share it)."""
    with closing(connection):
        ssh.open_connection(connection)
        path = tunnelled(connection, conninfo, address, probe=False)
        with host_session(
            contract, ssh.FabricRunner(connection), path, connect=connect, **given
        ) as s:
            yield s
