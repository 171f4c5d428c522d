"""The watchdog bounding one poll: a partitioned host answers nothing and TCP alone would wait
~15 minutes, so a poll past its budget is cut (`cut` ends every wait it may be in)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg


class PollWatch:
    def __init__(self, budget_s: float, cut: Callable[[], None]) -> None:
        self.budget_s, self.cut = budget_s, cut
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
            # A cut in flight (closing the SSH connection) is given a moment, not the budget.
            timer.join(timeout=1.0)
            self._ends_at = None

    def remaining_s(self) -> float:
        """Time left in the poll in flight; unbounded outside one (pauses, resumes)."""
        return float("inf") if self._ends_at is None else self._ends_at - time.monotonic()

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
