"""One host's guard session: its lookups, and the database through a tunnel to the host
(apart from orchestration.session, so that `leaseguard check` never imports Fabric)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, closing, contextmanager
from typing import TYPE_CHECKING, Any

from leaseguard.adapters import db, ssh
from leaseguard.adapters.host_lookup import look_up_host
from leaseguard.adapters.runtime import Runner
from leaseguard.core.contract import Contract
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError
from leaseguard.orchestration.session import GuardSession, IntakeAccess

if TYPE_CHECKING:
    from fabric import Connection

# A database path: the conninfo to connect with, and the tunnel it goes through (or None).
Path = AbstractContextManager[tuple[str, ssh.DatabaseTunnel | None]]


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
    """A host's session: its lookups run on a thread while `path` opens and, with `connect`,
    the guard's connection opens through it. Failures are raised in the order of the steps:
    the path's, the lookups', the connection's."""
    with ThreadPoolExecutor(1, thread_name_prefix="leaseguard-lookup") as thread:
        lookup = thread.submit(look_up_host, contract, runner, **given)
        with path as (conninfo, tunnel):
            try:
                early = db.connect(conninfo, contract.connect_timeout_s) if connect else None
            except DatabaseUnavailable as exc:  # named by the tunnel's cause, if it has one
                failure = (tunnel.failure() if tunnel is not None else None) or exc
                lookup.result()  # a lookup's failure is raised first
                raise failure from None
            except LeaseguardError:
                lookup.result()
                raise
            try:
                looked_up = lookup.result()
            except BaseException:
                if early is not None:
                    early.close()
                raise
            facts, clock = looked_up.facts, looked_up.clock
            with closing(
                GuardSession(
                    contract, conninfo, facts, runner, tunnel, host_minus_here=clock, intake=intake
                )
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
        path = ssh.tunnelled(connection, conninfo, address, probe=False)
        with host_session(
            contract, ssh.FabricRunner(connection), path, connect=connect, **given
        ) as s:
            yield s
