"""One host's guard session: its lookups, and the database through a tunnel to the host.

Apart from leaseguard.orchestration.session, so that a local session (`leaseguard check`)
never imports Fabric or paramiko.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, closing, contextmanager
from typing import TYPE_CHECKING, Any

from psycopg.conninfo import make_conninfo

from leaseguard.adapters.db import connect
from leaseguard.adapters.host_lookup import look_up_host
from leaseguard.adapters.runtime import Runner
from leaseguard.adapters.ssh import DatabaseAddress, DatabaseTunnel, FabricRunner, forwarded
from leaseguard.adapters.ssh_connect import open_connection
from leaseguard.core.contract import Contract
from leaseguard.core.dsn import reject_hostaddr
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError
from leaseguard.orchestration.session import Conn, GuardSession, IntakeAccess

if TYPE_CHECKING:  # adapters.ssh imports Fabric, naming the extra if it is missing
    from fabric import Connection

# A database path: the conninfo to connect with, and the tunnel it goes through (or None).
Path = AbstractContextManager[tuple[str, DatabaseTunnel | None]]


@contextmanager
def tunnelled(
    connection: Connection, conninfo: str, address: DatabaseAddress, *, probe: bool = True
) -> Iterator[tuple[str, DatabaseTunnel]]:
    """`conninfo` reaching `address` through a tunnel over `connection`, and the tunnel.

    Its host and port become the tunnel's local end, so the database needs no exposed
    port. The connection (and its jump hosts') is closed at the end, on every path.
    """
    try:
        reject_hostaddr(conninfo)
        with forwarded(connection, address, probe=probe) as tunnel:
            yield make_conninfo(conninfo, host="127.0.0.1", port=str(tunnel.port)), tunnel
    finally:
        connection.close()


@contextmanager
def host_session(
    contract: Contract,
    runner: Runner,
    path: Path,
    *,
    connect: bool = True,
    intake: IntakeAccess | None = None,
    **given: Any,
) -> Iterator[GuardSession]:
    """A host's session: its lookups and clock (one exec) run on a thread while `path` opens
    and, with `connect`, the guard's connection opens through it. Failures are reported in
    the order of the steps: the path's, the lookups', the connection's."""
    with ThreadPoolExecutor(1, thread_name_prefix="leaseguard-lookup") as thread:
        lookup = thread.submit(look_up_host, contract, runner, **given)
        with path as (conninfo, tunnel):
            early = _connect(contract, conninfo, tunnel) if connect else None
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
                GuardSession(
                    contract, conninfo, facts, runner, tunnel, host_minus_here=clock, intake=intake
                )
            ) as session:
                if early is not None:
                    session.adopt(early)
                yield session


def _connect(contract: Contract, dsn: str, tunnel: DatabaseTunnel | None) -> Conn | LeaseguardError:
    """The guard's connection, or its failure (naming the tunnel's cause when there is one),
    to be raised after the lookups'."""
    try:
        return connect(dsn, contract.connect_timeout_s)
    except DatabaseUnavailable as exc:
        return (tunnel.failure() if tunnel is not None else None) or exc
    except LeaseguardError as exc:
        return exc


@contextmanager
def ssh_session(
    connection: Connection,
    contract: Contract,
    conninfo: str,
    address: DatabaseAddress,
    *,
    connect: bool = False,
    **given: Any,
) -> Iterator[GuardSession]:
    """A host's session over one Fabric connection, carrying both its lookups and its tunnel
    (opened first: the lookups' thread and the tunnel then share it)."""
    try:
        open_connection(connection)
        path = tunnelled(connection, conninfo, address, probe=False)
        runner = FabricRunner(connection)
        with host_session(contract, runner, path, connect=connect, **given) as session:
            yield session
    finally:
        connection.close()
