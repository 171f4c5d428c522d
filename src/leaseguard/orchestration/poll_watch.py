"""The watchdog that bounds one poll of a guard session.

A partitioned host answers nothing, and TCP alone would wait ~15 minutes: a poll that
outlasts its budget is cut instead. `cut` is the session's, and ends every wait the poll
may be in (the tunnel, the database socket: `shutdown_socket`).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg


class PollWatch:
    """Cuts a poll that outlasts its budget: `cut` ends every wait the poll may be in."""

    def __init__(self, budget_s: float, cut: Callable[[], None]) -> None:
        self.budget_s = budget_s
        self.cut = cut
        self.expired = False
        self._ends_at: float | None = None

    @contextmanager
    def poll(self) -> Iterator[None]:
        self.expired = False
        self._ends_at = time.monotonic() + self.budget_s
        timer = threading.Timer(self.budget_s, self._expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            # A timer that never fired ends at once; a cut in flight (closing the SSH
            # connection) is given a moment, never the poll's budget again.
            timer.join(timeout=1.0)
            self._ends_at = None

    def remaining_s(self) -> float:
        """Time left in the poll in flight; unbounded outside one (pauses, resumes)."""
        if self._ends_at is None:
            return float("inf")
        return self._ends_at - time.monotonic()

    def _expire(self) -> None:
        self.expired = True
        self.cut()


def shutdown_socket(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Wake a thread blocked on `conn`: it reads end-of-file and fails at once."""
    try:
        with socket.socket(fileno=socket.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass  # already closed: nothing waits on it
