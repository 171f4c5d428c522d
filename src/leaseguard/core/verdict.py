"""The verdict of one check: decision, counts, live claims, and how it is reported."""

import enum
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from leaseguard.core.errors import EXIT_DEFER, EXIT_PROCEED


class Decision(enum.StrEnum):
    PROCEED = "proceed"
    DEFER = "defer"
    FAILED = "failed"  # a check that could not complete (fail closed): never a Verdict's


@dataclass(frozen=True)
class TaskTimeout:
    seconds: float
    source: str
    assumed: bool = False  # True when the lookup found nothing and default_s was used


@dataclass(frozen=True)
class RuntimeFacts:
    task_timeout: TaskTimeout | None
    runtime_started_at: datetime | None
    warnings: tuple[str, ...] = ()
    replicas: tuple[str, ...] = ()  # what a docker filter or a unit glob matched


@dataclass(frozen=True)
class Counts:
    live: int = 0
    stale: int = 0
    orphaned: int = 0
    queued: int = 0


@dataclass(frozen=True)
class LiveClaim:
    """A protected row; times are None when the row lacks them (it is protected anyway)."""

    id: str
    claimed_at: datetime | None
    lease_expires_at: datetime | None
    remaining_s: float | None
    never_expires: bool = False  # its expiry is 'infinity' (remaining_s None)
    expiry_null: bool = False  # its expiry column is NULL: judged by claimed_at + the lease

    def as_dict(self) -> dict[str, Any]:
        times = {key: _iso(getattr(self, key)) for key in ("claimed_at", "lease_expires_at")}
        return {**asdict(self), **times, "remaining_s": _round(self.remaining_s)}


@dataclass(frozen=True)
class Verdict:
    counts: Counts
    live: tuple[LiveClaim, ...]
    checked_at: datetime
    lease_s: float | None
    task_timeout: TaskTimeout | None
    runtime_started_at: datetime | None
    wait_upper_bound_s: float
    table: str
    host: str | None = None
    clock_offset_s: float | None = None
    warnings: tuple[str, ...] = ()
    fleet: dict[str, Any] | None = None  # FleetFacts.as_dict() of a judgment over several hosts
    replicas: tuple[str, ...] = ()
    # False when a live lease never ends or its end is unknown: no wait outlasts them all.
    wait_upper_bound_known: bool = True

    @property
    def decision(self) -> Decision:
        return Decision.DEFER if self.counts.live else Decision.PROCEED

    @property
    def exit_status(self) -> int:
        return EXIT_DEFER if self.decision is Decision.DEFER else EXIT_PROCEED

    def as_dict(self) -> dict[str, Any]:
        timeout = self.task_timeout
        return {
            "decision": self.decision.value,
            "host": self.host,
            "table": self.table,
            "lease_s": _round(self.lease_s),
            "task_timeout_s": _round(timeout.seconds) if timeout else None,
            "task_timeout_source": timeout.source if timeout else None,
            "task_timeout_assumed": timeout.assumed if timeout else False,
            "runtime_started_at": _iso(self.runtime_started_at),
            "checked_at": _iso(self.checked_at),
            "clock_offset_s": _round(self.clock_offset_s),
            "counts": asdict(self.counts),
            "live": [claim.as_dict() for claim in self.live],
            "live_listed": len(self.live),
            "wait_upper_bound_s": _round(self.wait_upper_bound_s),
            "wait_upper_bound_known": self.wait_upper_bound_known,
            "warnings": list(self.warnings),
            **({"fleet": self.fleet} if self.fleet else {}),
            **({"replicas": list(self.replicas)} if self.replicas else {}),
        }

    def timeline(self) -> str:
        timeout = self.task_timeout
        fields = [
            *(f"{name}={n}" for name, n in asdict(self.counts).items()),
            f"lease_s={_compact(self.lease_s)}",
            f"source={timeout.source if timeout else '-'}",
        ]
        if timeout and timeout.assumed:
            fields.append("timeout_assumed=yes")
        if self.replicas:
            fields.append(f"replicas={','.join(self.replicas)}")
        if self.fleet:
            fields.append(f"fleet={','.join(self.fleet['hosts'])}")
            fields.append(f"lease_from={self.fleet['lease_from'] or '-'}")
            fields.append(f"cutoff_from={self.fleet['orphan_cutoff_from'] or '-'}")
        if self.decision is Decision.DEFER:
            bound = _compact(self.wait_upper_bound_s)
            if not self.wait_upper_bound_known:
                bound = "never" if any(c.never_expires for c in self.live) else "unknown"
            fields.append(f"wait_upper_bound_s={bound}")
            fields += [f"longest={self.live[0].id}"] if self.live else []
        return timeline_line(self.checked_at, self.host, self.decision, *fields)


def failure_result(exc: Exception, host: str | None, at: datetime | None = None) -> dict[str, Any]:
    """The JSON of a check that could not complete; leaseguard's errors never carry a secret."""
    checked = {} if at is None else {"checked_at": at.isoformat()}
    failed = {"type": type(exc).__name__, "message": str(exc)}
    return {"decision": Decision.FAILED.value, "host": host, **checked, "error": failed}


def timeline_line(at: datetime, host: str | None, decision: Decision, *fields: str) -> str:
    """One log line per decision (a failure's: error=<its class>): read first after an incident."""
    stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return " ".join([stamp, "leaseguard", f"host={host or '-'}", f"decision={decision}", *fields])


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def _compact(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() or value >= 100 else f"{value:.1f}"
