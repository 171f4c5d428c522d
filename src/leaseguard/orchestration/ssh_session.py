"""A guard session over SSH: lookups on the host, the database through a tunnel.

Kept apart from leaseguard.orchestration.session so that a local session (`leaseguard check`)
never imports Fabric or paramiko.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Unpack

from psycopg.conninfo import make_conninfo

from leaseguard.adapters.db import connect
from leaseguard.adapters.host_lookup import HostLookup, look_up_host
from leaseguard.adapters.runtime import Given
from leaseguard.adapters.ssh import DatabaseAddress, DatabaseTunnel, FabricRunner, forwarded
from leaseguard.core.contract import Contract
from leaseguard.core.dsn import reject_hostaddr
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError
from leaseguard.orchestration.session import Conn, GuardSession

if TYPE_CHECKING:  # Fabric itself is imported by adapters.ssh, which names the extra if missing
    from fabric import Connection


@contextmanager
def ssh_session(
    connection: Connection,
    contract: Contract,
    conninfo: str,
    address: DatabaseAddress,
    *,
    connect: bool = False,
    **given: Unpack[Given],
) -> Iterator[GuardSession]:
    """A session over SSH: the tunnel to the database, then the lookups (one exec).

    With `connect` (the host whose tunnel the judgment runs through first) the guard's
    connection opens through the tunnel while the lookups run; otherwise none is opened, nor
    probed. A database address the host cannot reach fails that connection at once, naming
    the tunnel's cause (`DatabaseTunnel.failure`), after a failed lookup's own error.
    """
    with tunnelled(connection, conninfo, address, probe=False) as (tunnelled_dsn, tunnel):
        runner = FabricRunner(connection)
        if connect:
            lookup = Background(look_up_host, contract, runner, **given)
            early = connect_early(contract, tunnelled_dsn, tunnel)
            looked_up, opened = await_lookup(lookup.result, early)
        else:
            looked_up, opened = look_up_host(contract, runner, **given), None
        session = GuardSession(
            contract,
            tunnelled_dsn,
            looked_up.facts,
            runner,
            tunnel,
            host_minus_here=looked_up.clock,
        )
        if opened is not None:
            session.adopt(opened)
        try:
            yield session
        finally:
            session.close()


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
    """The guard's connection, opened while the lookups' exec runs (a login shell's time).

    Opened as GuardSession opens it: read-only. A failure is returned, to be reported after
    the lookups' own (`await_lookup`), naming the tunnel's failure when there is one. The
    Ansible front's one-host check.
    """
    try:
        return connect(dsn, contract.connect_timeout_s)
    except DatabaseUnavailable as exc:
        return (tunnel.failure() if tunnel is not None else None) or exc
    except LeaseguardError as exc:
        return exc


def await_lookup(
    lookup: Callable[[], HostLookup], early: Conn | LeaseguardError | None
) -> tuple[HostLookup, Conn | None]:
    """The lookups' result and the early connection; a failed lookup is reported first.

    The order the steps had when they ran one after another: a failed lookup first (the
    early connection, if it opened, is closed), then a connection that failed.
    """
    try:
        looked_up = lookup()
    except BaseException:
        if early is not None and not isinstance(early, LeaseguardError):
            early.close()
        raise
    if isinstance(early, LeaseguardError):
        raise early
    return looked_up, early


@contextmanager
def tunnelled_conninfo(
    connection: Connection, conninfo: str, address: DatabaseAddress
) -> Iterator[str]:
    """`conninfo` (dbname, user, password, ...) reaching `address` through a tunnel.

    Its host and port are replaced by the tunnel's local end, so the database never needs
    an exposed port. Shared by the Fabric tasks and the Ansible plugins.
    """
    with tunnelled(connection, conninfo, address) as (tunnelled_dsn, _):
        yield tunnelled_dsn


@contextmanager
def tunnelled(
    connection: Connection, conninfo: str, address: DatabaseAddress, *, probe: bool = True
) -> Iterator[tuple[str, DatabaseTunnel]]:
    """tunnelled_conninfo's conninfo and the tunnel itself (a session's Link)."""
    reject_hostaddr(conninfo)
    with forwarded(connection, address, probe=probe) as tunnel:
        yield make_conninfo(conninfo, host="127.0.0.1", port=str(tunnel.port)), tunnel
