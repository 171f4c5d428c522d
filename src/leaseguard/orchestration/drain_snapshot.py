"""A drain's status snapshot: one row per host (`HostDrain`) and the totals over them.

The JSON this builds is what `--status-file` holds and what `leaseguard status` reads back
(drain_status_read); the metrics file renders the same snapshot (drain_metrics). Nothing
here carries a message text: errors appear as exception class names only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from leaseguard.core.verdict import Decision, Verdict
from leaseguard.orchestration.drain import COUNTER_NAMES, DrainCounters, DrainState

SCOPE = "process_lifetime"
RUNNING, FINISHED, INTERRUPTED = "running", "finished", "interrupted"
COUNT_CLASSES = ("live", "stale", "orphaned", "queued")
_WORST_FIRST = (Decision.FAILED, Decision.DEFER, "pending", Decision.PROCEED)


# --- one host's drain, as the Drainer reports it ------------------------------------------


@dataclass
class HostDrain:
    """What one host's drain looks like right now (a row of the snapshot)."""

    host: str
    state: str = RUNNING
    decision: str = "pending"
    exit_status: int | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_CLASSES, 0))
    wait_upper_bound_s: float = 0.0
    elapsed_s: float = 0.0
    deadline_s: float = 0.0
    paused_intake: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))
    errors: dict[str, int] = field(default_factory=dict)  # reported inside `counters`

    def take_counters(self, counters: DrainCounters) -> None:
        snapshot = counters.snapshot()
        self.counters = {name: _count(snapshot[name]) for name in COUNTER_NAMES}
        self.errors = {str(kind): _count(n) for kind, n in counters.errors.items()}

    def take_verdict(self, verdict: Verdict) -> None:
        self.counts = {name: _count(n) for name, n in verdict.counts.as_dict().items()}
        self.wait_upper_bound_s = rounded_seconds(verdict.wait_upper_bound_s)
        self.decision = verdict.decision.value

    def take_state(self, state: DrainState) -> None:
        if state.verdict is not None:
            self.take_verdict(state.verdict)
        self.take_counters(state.counters)
        self.elapsed_s = rounded_seconds(state.elapsed_s)
        self.deadline_s = rounded_seconds(state.deadline_s)

    def as_dict(self) -> dict[str, Any]:
        row = asdict(self)  # copies: the caller may keep it while the row changes
        row["counters"]["errors"] = row.pop("errors")
        return row


def _count(value: Any) -> int:
    return max(int(value), 0)


def rounded_seconds(value: float | None) -> float:
    return round(max(float(value or 0.0), 0.0), 3)


def build_snapshot(
    rows: list[dict[str, Any]],
    *,
    pid: int,
    pid_started: int | None,
    started_at: float,
    updated_at: float,
) -> dict[str, Any]:
    """The JSON of the status file: the totals over every host, then each host's row."""
    errors: Counter[str] = Counter()
    for row in rows:
        errors.update(row["counters"]["errors"])
    states = {row["state"] for row in rows}
    state = next((s for s in (RUNNING, INTERRUPTED) if s in states or not rows), FINISHED)
    exits = [row["exit_status"] for row in rows]
    return {
        "available": True,
        "scope": SCOPE,
        "state": state,
        "pid": pid,
        "pid_started": pid_started,
        "hosts": [row["host"] for row in rows],
        "decision": _worst(row["decision"] for row in rows),
        "exit_status": None if state == RUNNING else _worst_exit(exits),
        "counts": {name: sum(row["counts"][name] for row in rows) for name in COUNT_CLASSES},
        "wait_upper_bound_s": max((row["wait_upper_bound_s"] for row in rows), default=0.0),
        "elapsed_s": max((row["elapsed_s"] for row in rows), default=0.0),
        "deadline_s": max((row["deadline_s"] for row in rows), default=0.0),
        "paused_intake": sorted({name for row in rows for name in row["paused_intake"]}),
        "counters": {
            **{name: sum(row["counters"][name] for row in rows) for name in COUNTER_NAMES},
            "errors": dict(sorted(errors.items())),
        },
        "started_at": _iso(started_at),
        "updated_at": _iso(updated_at),
        "updated_at_unix": round(updated_at, 3),
        "drains": rows,
    }


def _worst(decisions: Iterable[str]) -> str:
    seen = set(decisions)
    return next((d for d in _WORST_FIRST if d in seen), "pending")


def _worst_exit(exits: list[int | None]) -> int | None:
    known = [e for e in exits if e is not None]
    for status in (1, 75):
        if status in known:
            return status
    return 0 if known else None


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds")
