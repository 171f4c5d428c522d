"""One host's guard session: its lookups, and the database through a tunnel to the host.

Apart from leaseguard.orchestration.session, so that a local session (`leaseguard check`)
never imports Fabric or paramiko.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from psycopg.conninfo import make_conninfo

from leaseguard.adapters.db import connect
from leaseguard.adapters.host_lookup import HostLookup, look_up_host
from leaseguard.adapters.runtime import Runner
from leaseguard.adapters.ssh import DatabaseAddress, DatabaseTunnel, FabricRunner, forwarded
from leaseguard.adapters.ssh_connect import open_connection
from leaseguard.core.contract import Contract
from leaseguard.core.dsn import reject_hostaddr
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError
from leaseguard.orchestration.session import Conn, GuardSession

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
    look_up: Callable[..., HostLookup] = look_up_host,
    **given: Any,
) -> Iterator[GuardSession]:
    """A host's session: `look_up` (its lookups and clock, one exec) runs on a thread while
    `path` opens and, with `connect`, the guard's connection opens through it. Failures are
    reported in the order of the steps: the path's, the lookups', the connection's."""
    lookup = Background(look_up, contract, runner, **given)
    try:
        with path as (conninfo, tunnel):
            early = connect_early(contract, conninfo, tunnel) if connect else None
            looked_up, opened = await_lookup(lookup.result, early)
            session = GuardSession(
                contract, conninfo, looked_up.facts, runner, tunnel, host_minus_here=looked_up.clock
            )
            if opened is not None:
                session.adopt(opened)
            try:
                yield session
            finally:
                session.close()
    finally:
        lookup.join()


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


class Background(threading.Thread):
    """One call run in a thread; result() joins it and returns or raises what it did."""

    def __init__(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(name="leaseguard-lookup", daemon=True)
        self._call = functools.partial(call, *args, **kwargs)
        self._value: Any = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to result(), in the caller's thread
            self._error = exc

    def result(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


def connect_early(
    contract: Contract, dsn: str, tunnel: DatabaseTunnel | None = None
) -> Conn | LeaseguardError:
    """The guard's (read-only) connection, opened while the lookups run; a failure is
    returned, naming the tunnel's cause when there is one, to be raised after theirs."""
    try:
        return connect(dsn, contract.connect_timeout_s)
    except DatabaseUnavailable as exc:
        return (tunnel.failure() if tunnel is not None else None) or exc
    except LeaseguardError as exc:
        return exc


def await_lookup(
    lookup: Callable[[], HostLookup], early: Conn | LeaseguardError | None
) -> tuple[HostLookup, Conn | None]:
    """The lookups' result and the early connection: a failed lookup first (the connection,
    if it opened, closed), then a connection that failed."""
    try:
        looked_up = lookup()
    except BaseException:
        if early is not None and not isinstance(early, LeaseguardError):
            early.close()
        raise
    if isinstance(early, LeaseguardError):
        raise early
    return looked_up, early
