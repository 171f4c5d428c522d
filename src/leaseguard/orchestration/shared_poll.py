"""Each host of a fleet drained as if alone, all of their polls the fleet's one query.

Every host's drain asks for its verdict on its own schedule; it gets it from the fleet's
last poll when that poll began after this host's previous answer and within `fresh_s`, else
from a new poll, made once for every host (GuardSession.judge_each). The lock makes the
hosts that ask meanwhile wait for the poll in flight, so their drains fall into step: one
query per poll interval for the whole fleet, whatever its size.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Verdict
from leaseguard.orchestration.session import GuardSession


@dataclass
class _Poll:
    """One judge_each poll (its verdicts or its failure), and when each host last took it."""

    started: float
    outcome: dict[str, Verdict] | LeaseguardError
    served: dict[str, float] = field(default_factory=dict)

    def stale_for(self, host: str, now: float, fresh_s: float) -> bool:
        return now - self.started > fresh_s or self.started < self.served.get(host, -1.0)


class SharedPoll:
    """The verdicts of a judge_each session's hosts, shared as the module docstring says."""

    def __init__(self, session: GuardSession, fresh_s: float) -> None:
        self.session, self.fresh_s = session, fresh_s
        self._last: _Poll | None = None
        self._lock = threading.Lock()

    def judge_for(self, host: str) -> Callable[[], Verdict]:
        """A `judge` for `host`'s drain (a Drainer's)."""
        return lambda: self.verdict(host)

    def verdict(self, host: str) -> Verdict:
        with self._lock:
            now = time.monotonic()
            last = self._last
            if last is None or last.stale_for(host, now, self.fresh_s):
                try:
                    last = _Poll(now, self.session.judge_each())
                except LeaseguardError as exc:  # every host that asks now gets this failure
                    last = _Poll(now, exc)
                self._last = last
            last.served[host] = time.monotonic()  # after the poll it took
        if isinstance(last.outcome, LeaseguardError):
            raise last.outcome
        return last.outcome[host]
