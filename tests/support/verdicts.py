"""One way to build a Verdict in a test: a deferring or proceeding check, fields overridable."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from leaseguard.core.verdict import Counts, LiveClaim, Verdict

NOW = datetime(2026, 9, 9, tzinfo=UTC)


def make_verdict(
    *live_ids: str, remaining_s: float = 600.0, at: datetime = NOW, **fields: Any
) -> Verdict:
    """A check at `at` that found these live claims (each `remaining_s` from its lease end);
    no live id: it proceeds. Any other Verdict field can be given by name."""
    claims = tuple(LiveClaim(str(i), at, at, remaining_s) for i in live_ids)
    values: dict[str, Any] = {
        "counts": Counts(live=len(claims)),
        "live": claims,
        "checked_at": at,
        "lease_s": 7200.0,
        "task_timeout": None,
        "runtime_started_at": None,
        "wait_upper_bound_s": remaining_s if claims else 0.0,
        "table": "execution_runs",
        "host": "app1",
    }
    return Verdict(**{**values, **fields})
