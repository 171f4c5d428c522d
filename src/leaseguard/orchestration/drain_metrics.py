"""A drain's status snapshot in the Prometheus text format (for node_exporter's textfile
collector, `--metrics-file`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leaseguard.orchestration.drain_snapshot import COUNT_CLASSES, RUNNING

_COUNTER_HELP = {
    "polls": "Polls of the claim table made by this drain.",
    "idle_polls": "Polls that changed nothing (no lease ended, no claim appeared).",
    "live_count_changes": "Polls after which the number of live claims differed.",
    "leases_ended": "Live claims seen to end during this drain.",
    "claims_appeared": "Live claims that appeared during this drain.",
}
_PREFIX = "leaseguard_drain_"


def render_metrics(snapshot: Mapping[str, Any]) -> str:
    """The snapshot as Prometheus text: HELP/TYPE once per metric, one sample per host."""
    rows = snapshot["drains"]
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        full = _PREFIX + name
        out.append(f"# HELP {full} {help_text}")
        out.append(f"# TYPE {full} {kind}")
        out.extend(f"{full}{labels} {_number(value)}" for labels, value in samples)

    def per_host(value_of: Any) -> list[tuple[str, float]]:
        return [(_labels(host=row["host"]), value_of(row)) for row in rows]

    for name, help_text in _COUNTER_HELP.items():
        metric(
            f"{name}_total",
            "counter",
            help_text,
            per_host(lambda row, n=name: row["counters"][n]),
        )
    metric(
        "errors_total",
        "counter",
        "Failed polls, by exception class name.",
        [
            (_labels(host=row["host"], type=kind), n)
            for row in rows
            for kind, n in sorted(row["counters"]["errors"].items())
        ],
    )
    metric(
        "claims",
        "gauge",
        "Claimed or queued rows at the last poll, by class.",
        [
            (_labels(host=row["host"], **{"class": name}), row["counts"][name])
            for row in rows
            for name in COUNT_CLASSES
        ],
    )
    gauges = {
        "wait_upper_bound_seconds": ("The longest remaining live lease.", "wait_upper_bound_s"),
        "elapsed_seconds": ("Seconds since the drain started.", "elapsed_s"),
        "deadline_seconds": ("When the drain gives up, in seconds from its start.", "deadline_s"),
    }
    for name, (help_text, key) in gauges.items():
        metric(name, "gauge", help_text, per_host(lambda row, k=key: row[k]))
    metric(
        "running",
        "gauge",
        "1 while the drain runs, 0 once it is over.",
        per_host(lambda row: row["state"] == RUNNING),
    )
    metric(
        "exit_status",
        "gauge",
        "The drain's exit status once over (0 drained, 75 deadline reached, 1 failed); "
        "-1 while it runs.",
        per_host(lambda row: -1 if row["exit_status"] is None else row["exit_status"]),
    )
    metric(
        "paused_intake",
        "gauge",
        "Intake pauses this drain holds right now (pg_cron jobs, commands).",
        per_host(lambda row: len(row["paused_intake"])),
    )
    metric(
        "last_update_timestamp_seconds",
        "gauge",
        "When these metrics were written (Unix time); an old value means a stuck writer.",
        per_host(lambda row: snapshot["updated_at_unix"]),
    )
    return "\n".join(out) + "\n"


def _labels(**labels: str) -> str:
    inner = ",".join(f'{key}="{_escape(str(value))}"' for key, value in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)
