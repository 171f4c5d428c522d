"""A host's SSH connection opened and its lookups' one exec started, in the background.

Kept free of the database driver on purpose: `fab guard` starts its hosts with this before
it imports psycopg and the judging code (~150 ms of a fab run's CPU), so that the import
runs while the hosts do their part (the SSH handshake, the login shell, `docker inspect`)
instead of before it (tests/unit/test_fabric_imports.py keeps it so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from leaseguard.adapters.host_lookup import HostLookup, look_up_host
from leaseguard.adapters.runtime import Given
from leaseguard.adapters.ssh import FabricRunner, open_connection
from leaseguard.core.contract import Contract

if TYPE_CHECKING:  # Fabric itself is imported by adapters.ssh, which names the extra if missing
    from fabric import Connection


T = TypeVar("T")


@dataclass(frozen=True)
class HostStart:
    """A host's connection, `opened` once its SSH handshake is done, then its lookups.

    `lookup` may be cancelled (a start nobody took over); `opened` never is.
    """

    connection: Connection
    runner: FabricRunner
    opened: Future[None] = field(default_factory=Future)
    lookup: Future[HostLookup] = field(default_factory=Future)

    def abandon(self) -> None:
        """Nobody takes this host over: cancel its lookup and close its connection, which
        ends a lookup in flight. Not waited for: closing does not interrupt a TCP connect
        in flight, which only the host's connect timeout ends (a usage error exits at once)."""
        self.lookup.cancel()
        self.connection.close()


def start_host(connection: Connection, contract: Contract, **given: Unpack[Given]) -> HostStart:
    """Open `connection` and then run the lookups' one exec, on a thread of their own.

    The two run one after the other: the connection is opened once, before its second user
    (the tunnel, which waits for `opened`) starts. Neither is waited for here; a failure is
    raised by the future that failed (a failed open fails the lookup too). A daemon
    thread: a start nobody takes over is `abandon`ed, and a run that ends early (a usage
    error) never waits at exit for a host still connecting.
    """
    start = HostStart(connection, FabricRunner(connection))
    threading.Thread(
        target=_run, args=(start, contract, given), name="leaseguard-start", daemon=True
    ).start()
    return start


def _run(start: HostStart, contract: Contract, given: Given) -> None:
    if _settle(start.opened, open_connection, start.connection):
        _settle(start.lookup, look_up_host, contract, start.runner, **given)
    elif start.lookup.set_running_or_notify_cancel():
        start.lookup.set_exception(start.opened.exception())


def _settle(future: Future[T], step: Callable[..., T], *args: Any, **kwargs: Any) -> bool:
    """Run `step` into `future` (unless it was cancelled); whether it succeeded."""
    if not future.set_running_or_notify_cancel():
        return False
    try:
        future.set_result(step(*args, **kwargs))
    except BaseException as exc:  # the caller's: it re-raises it from the future
        future.set_exception(exc)
        return False
    return True
