"""The fleet rule, hosts' reports as facts, clock offsets. Work that may run on any host is judged
once: the orphan cut-off is the OLDEST start (one unknown: unknown), the lease the LONGEST."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from leaseguard.core.errors import ConfigError, LeaseguardError, LookupFailed
from leaseguard.core.lookups import parse_timeout_s, parse_timestamp
from leaseguard.core.restart import start_of
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout

CONTROLLER_SKEW_BOUND_S = 5.0  # beyond it, this clock is warned about (given starts are read in it)
# A host's report (`host_report`, task_timeout's result as registered; a --facts-file entry).
REPORT_KEYS = frozenset(
    {"task_timeout_s", "runtime_started_at", "source", "assumed", "warnings", "replicas"}
    | {"runtime_started_epoch_s", "clock", "changed", "failed", "msg", "error", "host"}
)


@dataclass(frozen=True)
class ClockOffset:
    """One clock minus another (a host's, this machine's, the database's), and how precisely."""

    offset_s: float
    uncertainty_s: float

    def tolerance_s(self, configured_s: float) -> float:
        """The orphan tolerance widened by the uncertainty: the offset that moved the start may
        be off by all of it (a claim at exactly start - clock_skew_s is never orphaned)."""
        return configured_s + self.uncertainty_s

    def exceeds(self, configured_s: float) -> bool:
        """The clocks certainly differ by more than `configured_s`."""
        return abs(self.offset_s) - self.uncertainty_s > configured_s

    def chained(self, here: "ClockOffset") -> "ClockOffset":
        """Host minus database from host minus here and here minus database; uncertainties add."""
        return ClockOffset(self.offset_s + here.offset_s, self.uncertainty_s + here.uncertainty_s)

    def in_database_clock(self, started_at: datetime | None) -> datetime | None:
        return None if started_at is None else started_at - timedelta(seconds=self.offset_s)

    @property
    def direction(self) -> str:
        return "ahead of" if self.offset_s > 0 else "behind"

    def warning(self, host: str, configured_s: float) -> str:
        return (
            f"host {host} clock is {abs(self.offset_s):.3f}s {self.direction} the database clock "
            f"(clock_skew_s={configured_s:g}); its runtime start was moved into the database clock "
            f"for the orphan cut-off (tolerance {self.tolerance_s(configured_s):.3f}s)"
        )

    def controller_warning(self) -> tuple[str, ...]:
        """This machine's clock minus the database's, warned beyond CONTROLLER_SKEW_BOUND_S."""
        if not self.exceeds(CONTROLLER_SKEW_BOUND_S):
            return ()
        return (
            f"this machine's clock is {abs(self.offset_s):.1f}s {self.direction} "
            f"the database clock (more than {CONTROLLER_SKEW_BOUND_S:g}s): every judgment "
            "compares times in the database clock, but start times given here are read in this "
            "one; fix the clocks (NTP)",
        )


def controller_offset(db_reading_s: float, before_s: float, after_s: float) -> ClockOffset:
    """This machine's clock minus the database's, read between two readings of this one."""
    return ClockOffset((before_s + after_s) / 2 - db_reading_s, (after_s - before_s) / 2)


@dataclass(frozen=True)
class FleetFacts:
    facts: RuntimeFacts
    hosts: tuple[str, ...]
    lease_from: str | None  # host whose task timeout is the longest (None: no timeout needed)
    cutoff_from: str | None  # host whose runtime started first (None: cut-off unknown)

    def as_dict(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "lease_from": self.lease_from,
            "orphan_cutoff_from": self.cutoff_from,
        }


def combine_facts(
    per_host: Mapping[str, RuntimeFacts],
    offsets: Mapping[str, ClockOffset] | None = None,
    clock_skew_s: float = 0.0,
) -> FleetFacts:
    """The fleet rule; `offsets` (host minus database) move starts first, warned beyond the skew."""
    if not per_host:
        raise ConfigError("a fleet judgment needs the facts of at least one host")
    hosts, moved = tuple(sorted(per_host)), dict(per_host)
    for host, its in per_host.items():
        if its.runtime_started_at is not None and (offset := (offsets or {}).get(host)):
            warned = (offset.warning(host, clock_skew_s),) if offset.exceeds(clock_skew_s) else ()
            at = offset.in_database_clock(its.runtime_started_at)
            moved[host] = replace(its, runtime_started_at=at, warnings=its.warnings + warned)
    timeouts = {h: t for h in hosts if (t := moved[h].task_timeout) is not None}
    if timeouts and len(timeouts) != len(hosts):
        missing = ", ".join(h for h in hosts if h not in timeouts)
        raise ConfigError(f"no task timeout is known for host(s) {missing}")
    starts = {h: moved[h].runtime_started_at for h in hosts}
    # max() and min() keep the first of equal values: hosts are sorted, so names break ties.
    lease_from = max(timeouts, key=lambda h: timeouts[h].seconds) if timeouts else None
    known = None not in starts.values()  # one unknown start: the cut-off is unknown
    cutoff_from = min(hosts, key=starts.__getitem__) if known else None  # type: ignore[arg-type]
    own = timeouts[lease_from] if lease_from is not None else None  # a host may be named ""
    timeout = replace(own, source=f"{lease_from}:{own.source}") if own else None
    warnings = tuple(
        warning if warning.startswith(f"host {host}") else f"host {host}: {warning}"
        for host in hosts
        for warning in moved[host].warnings
    )
    replicas = tuple(f"{host}:{name}" for host in hosts for name in moved[host].replicas)
    started = starts[cutoff_from] if cutoff_from is not None else None
    facts = RuntimeFacts(timeout, started, warnings, replicas)
    return FleetFacts(facts, hosts, lease_from, cutoff_from)


def host_report(facts: RuntimeFacts, clock: ClockOffset | None = None) -> dict[str, Any]:
    """A host's report (task_timeout's result): the value and its provenance, never the env."""
    timeout, started = facts.task_timeout, facts.runtime_started_at
    report: dict[str, Any] = {
        "task_timeout_s": timeout.seconds if timeout else None,
        "source": timeout.source if timeout else None,
        "assumed": timeout.assumed if timeout else False,
        **start_of(started),
        "warnings": list(facts.warnings),
        "replicas": list(facts.replicas),
    }
    if clock is not None and started is not None:
        report["clock"] = {"offset_s": clock.offset_s, "uncertainty_s": clock.uncertainty_s}
    return report


def fleet_facts(
    reports: Mapping[str, Any],
    hosts: Iterable[str] = (),
    *,
    given_source: str = "given",
    with_clocks: bool = True,
) -> tuple[dict[str, RuntimeFacts], dict[str, ClockOffset] | None]:
    """Hosts' facts and clocks minus here; fails closed naming each host without a usable report."""
    problems = []
    for host in sorted({*hosts, *reports}):
        report, said = reports.get(host), None
        if not isinstance(report, Mapping) or not report:
            said = "no lookup result (it did not run: failed or unreachable earlier?)"
        elif report.get("unreachable"):
            said = "unreachable during its lookup"
        elif report.get("skipped"):
            said = "its lookup was skipped"
        elif report.get("failed"):
            error = report.get("error")
            detail = error.get("message") if isinstance(error, Mapping) else None
            said = f"its lookup failed ({detail})" if detail else "its lookup failed"
        problems += [f"host {host}: {said}"] if said else []
    if problems:
        raise LookupFailed("the fleet judgment needs every host's lookup: " + "; ".join(problems))
    per_host: dict[str, RuntimeFacts] = {}
    offsets: dict[str, ClockOffset] = {}
    for host, report in reports.items():
        if unknown := sorted(str(key) for key in report if key not in REPORT_KEYS):
            raise ConfigError(
                f"host {host}: unknown key(s) {', '.join(unknown)} "
                "(expected task_timeout_s, runtime_started_at)"
            )
        timeout, started, what = None, report.get("runtime_started_at"), f"host {host}: "
        try:  # a bad value is a usage error naming host and key
            if report.get("task_timeout_s") is not None:
                seconds = parse_timeout_s(report["task_timeout_s"], what=what + "task_timeout_s")
                source = str(report.get("source") or f"{given_source}:task_timeout_s")
                timeout = TaskTimeout(seconds, source, assumed=bool(report.get("assumed")))
            if started is not None and not isinstance(started, datetime):
                started = parse_timestamp(str(started), what=what + "runtime_started_at")
        except LeaseguardError as exc:
            raise ConfigError(str(exc)) from None
        if isinstance(started, datetime) and started.tzinfo is None:  # YAML's unquoted timestamps
            raise ConfigError(f"{what}runtime_started_at has no timezone")
        warnings = tuple(str(w) for w in report.get("warnings") or ())
        replicas = tuple(str(name) for name in report.get("replicas") or ())
        per_host[host] = RuntimeFacts(timeout, started, warnings, replicas)
    # Clocks only once every report passed: a usage error anywhere is reported first.
    dated = [h for h, facts in per_host.items() if facts.runtime_started_at is not None]
    for host in dated if with_clocks else []:
        clock = reports[host].get("clock")
        try:
            offsets[host] = ClockOffset(float(clock["offset_s"]), float(clock["uncertainty_s"]))
        except (KeyError, TypeError, ValueError):
            raise LookupFailed(
                f"host {host}: its lookup result has no clock reading (pass the registered "
                "result of leaseguard.deploy.task_timeout as it is)"
            ) from None
    return per_host, offsets if with_clocks else None
