"""Each host of a fleet drained as if alone, all of their polls the fleet's one query.

A host's drain takes the fleet's last poll when that poll began after this host's previous
answer and within `fresh_s`, else a new poll (GuardSession.judge_each) made for every host.
Hosts asking meanwhile wait on the lock for the poll in flight, so their drains fall into
step: one query per poll interval for the whole fleet, whatever its size.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Verdict
from leaseguard.orchestration.session import GuardSession


class SharedPoll:
    def __init__(self, session: GuardSession, fresh_s: float) -> None:
        self.session, self.fresh_s = session, fresh_s
        self._lock = threading.Lock()
        self._started = 0.0  # when the last poll began
        self._outcome: dict[str, Verdict] | LeaseguardError | None = None
        self._served: dict[str, float] = {}  # when each host last took that poll

    def judge_for(self, host: str) -> Callable[[], Verdict]:
        """A `judge` for `host`'s drain (a Drainer's)."""
        return lambda: self.verdict(host)

    def verdict(self, host: str) -> Verdict:
        with self._lock:
            now = time.monotonic()
            stale = now - self._started > self.fresh_s
            if self._outcome is None or stale or self._started < self._served.get(host, -1.0):
                try:
                    self._outcome = self.session.judge_each()
                except LeaseguardError as exc:  # every host that asks now gets this failure
                    self._outcome = exc
                self._started, self._served = now, {}
            self._served[host] = time.monotonic()  # after the poll it took
            outcome = self._outcome
        if isinstance(outcome, LeaseguardError):
            raise outcome
        return outcome[host]
