"""A running drain, observable from outside: `--status-file` (JSON, read back by `leaseguard
status`) and `--metrics-file` (Prometheus text, for node_exporter's textfile collector),
rewritten atomically after every poll. No fsync: a snapshot matters only while its writer
lives. Errors appear as class names only: a driver error echoing a DSN cannot leak.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from leaseguard.core.errors import ConfigError
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.drain import COUNTER_NAMES, DrainObserver, DrainResult, DrainState
from leaseguard.orchestration.drain_status_read import (
    FINISHED,
    INTERRUPTED,
    RUNNING,
    SCOPE,
    process_start_ticks,
)
from leaseguard.orchestration.intake import Intake

log = logging.getLogger("leaseguard.drain")

COUNT_CLASSES = ("live", "stale", "orphaned", "queued")
_WORST_FIRST = (Decision.FAILED.value, Decision.DEFER.value, "pending", Decision.PROCEED.value)


def _count(value: Any) -> int:
    return max(int(value), 0)


def _seconds(value: float | None) -> float:
    return round(max(float(value or 0.0), 0.0), 3)


class HostObserver(DrainObserver):
    """The Drainer's observer for one host: updates its row, then rewrites the files."""

    def __init__(self, board: StatusBoard, row: dict[str, Any], intake: Intake | None) -> None:
        self.board, self.row, self.intake = board, row, intake

    def after_poll(self, state: DrainState) -> None:
        self._update(state)

    def finished(self, result: DrainResult | None) -> None:
        """The drain is over; None: it ended by an exception (an interrupt, a crash)."""
        if result is None:
            self._update(None, state=INTERRUPTED, decision=Decision.FAILED.value, exit_status=1)
        else:
            ended = {"decision": result.decision.value, "exit_status": result.exit_status}
            self._update(result, state=FINISHED, **ended)

    def _update(self, drain: DrainState | None, **ended: Any) -> None:
        with self.board.lock:
            row = self.row
            verdict = drain.verdict if drain is not None else None
            if verdict is not None:
                row["counts"] = {name: _count(n) for name, n in verdict.counts.as_dict().items()}
                row["wait_upper_bound_s"] = _seconds(verdict.wait_upper_bound_s)
                row["decision"] = verdict.decision.value
            if drain is not None:
                counters = drain.counters.snapshot()
                row.update(
                    elapsed_s=_seconds(drain.elapsed_s),
                    deadline_s=_seconds(drain.deadline_s),
                    counters={
                        **{name: _count(counters[name]) for name in COUNTER_NAMES},
                        "errors": {str(kind): _count(n) for kind, n in counters["errors"].items()},
                    },
                )
            paused = self.intake.paused_intake() if self.intake is not None else []
            row.update(ended, paused_intake=[str(name) for name in paused])
        self.board.publish()


class StatusBoard:
    """The snapshot of one drain process over its host(s), written to the files asked for.

    Several hosts (`fab -H app1,app2 drain`) drain in threads and share one board, so the
    files always hold every host; each write happens under the board's lock (an older
    snapshot never overwrites a newer one).
    """

    def __init__(
        self,
        status_file: str | Path | None,
        metrics_file: str | Path | None,
    ) -> None:
        self.status_path = Path(status_file) if status_file else None
        self.metrics_path = Path(metrics_file) if metrics_file else None
        self.lock = threading.RLock()
        self.rows: dict[str, dict[str, Any]] = {}
        self.started_at = time.time()
        self.pid = os.getpid()
        self.pid_started = process_start_ticks(self.pid)
        self._failing: set[Path] = set()

    def observer(self, host: str, intake: Intake | None = None) -> HostObserver:
        """The observer for one host's Drainer; its row appears in the files at once."""
        with self.lock:
            row = self.rows.setdefault(host, _new_row(host))
        return HostObserver(self, row, intake)

    def check_writable(self) -> None:
        """Write the first snapshot now: a path that cannot take it fails before any pause,
        and a previous drain's `finished` is replaced at once."""
        for path, text in self._texts(self.snapshot()):
            try:
                atomic_write(path, text)
            except OSError as exc:
                raise ConfigError(
                    f"cannot write {path} ({type(exc).__name__}): the drain needs its directory "
                    "to exist and be writable"
                ) from None

    def snapshot(self) -> dict[str, Any]:
        """The status file's JSON: the totals over every host, then each host's row."""
        with self.lock:
            rows = copy.deepcopy(list(self.rows.values()))
        updated_at = time.time()
        errors: Counter[str] = Counter()
        for row in rows:
            errors.update(row["counters"]["errors"])
        states = {row["state"] for row in rows}
        state = next((s for s in (RUNNING, INTERRUPTED) if s in states or not rows), FINISHED)
        exits = {row["exit_status"] for row in rows} - {None}
        decisions = {row["decision"] for row in rows}

        def most(key: str) -> float:
            return max((row[key] for row in rows), default=0.0)

        return {
            "available": True,
            "scope": SCOPE,
            "state": state,
            "pid": self.pid,
            "pid_started": self.pid_started,
            "hosts": [row["host"] for row in rows],
            "decision": next((d for d in _WORST_FIRST if d in decisions), "pending"),
            "exit_status": None
            if state == RUNNING
            else next((e for e in (1, 75) if e in exits), 0 if exits else None),
            "counts": {name: sum(row["counts"][name] for row in rows) for name in COUNT_CLASSES},
            "wait_upper_bound_s": most("wait_upper_bound_s"),
            "elapsed_s": most("elapsed_s"),
            "deadline_s": most("deadline_s"),
            "paused_intake": sorted({name for row in rows for name in row["paused_intake"]}),
            "counters": {
                **{name: sum(row["counters"][name] for row in rows) for name in COUNTER_NAMES},
                "errors": dict(sorted(errors.items())),
            },
            "started_at": _iso(self.started_at),
            "updated_at": _iso(updated_at),
            "updated_at_unix": round(updated_at, 3),
            "drains": rows,
        }

    def publish(self) -> None:
        """Rewrite both files now; a failed write never stops the drain: it is logged once."""
        if self.status_path is None and self.metrics_path is None:
            return
        with self.lock:
            snapshot = self.snapshot()
            for path, text in self._texts(snapshot, indent=1):
                self._write(path, text, final=snapshot["state"] != RUNNING)

    def _texts(self, snapshot: dict[str, Any], indent: int | None = None) -> list[tuple[Path, str]]:
        texts = []
        if self.status_path is not None:
            newline = "\n" if indent else ""
            texts.append((self.status_path, json.dumps(snapshot, indent=indent) + newline))
        if self.metrics_path is not None:
            texts.append((self.metrics_path, render_metrics(snapshot)))
        return texts

    def _write(self, path: Path, text: str, final: bool) -> None:
        try:
            atomic_write(path, text)
        except OSError as exc:
            if final and path.exists():  # a file saying `running` would outlive the drain
                try:  # the final snapshot over the old file's own space, emptied first
                    with path.open("r+", encoding="utf-8") as handle:
                        handle.truncate(0)
                        handle.write(text)
                except OSError as last:  # then no file rather than one saying `running`
                    with contextlib.suppress(OSError):
                        path.unlink()
                    log.error(
                        "drain status not written at the end reason=status_write_failed "
                        "path=%s exc_type=%s; the stale file was removed so that it does not "
                        "say running",
                        path,
                        type(last).__name__,
                    )
                    return
                self._warn_once(path, exc)
                log.info("drain status written in place at the end path=%s", path)
            else:
                self._warn_once(path, exc)
            return
        if path in self._failing:
            self._failing.discard(path)
            log.info("drain status written again path=%s", path)

    def _warn_once(self, path: Path, exc: OSError) -> None:
        if path not in self._failing:
            self._failing.add(path)
            log.warning(
                "drain status not written reason=status_write_failed path=%s exc_type=%s",
                path,
                type(exc).__name__,
            )


def _new_row(host: str) -> dict[str, Any]:
    return {
        "host": host,
        "state": RUNNING,
        "decision": "pending",
        "exit_status": None,
        "counts": dict.fromkeys(COUNT_CLASSES, 0),
        "wait_upper_bound_s": 0.0,
        "elapsed_s": 0.0,
        "deadline_s": 0.0,
        "paused_intake": [],
        "counters": {**dict.fromkeys(COUNTER_NAMES, 0), "errors": {}},
    }


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds")


def atomic_write(path: Path, text: str) -> None:
    """Write a temp file beside `path`, then rename it over `path` (readers see old or new).

    The temp name ends in `.tmp`, which node_exporter's textfile collector ignores (it reads
    `*.prom` only); the mode is 0644 minus the umask, so a collector running as another user
    can read the result.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


# --- the same snapshot in the Prometheus text format ---------------------------------------

_COUNTER_HELP = {
    "polls": "Polls of the claim table made by this drain.",
    "idle_polls": "Polls that changed nothing (no lease ended, no claim appeared).",
    "live_count_changes": "Polls after which the number of live claims differed.",
    "leases_ended": "Live claims seen to end during this drain.",
    "claims_appeared": "Live claims that appeared during this drain.",
}
_GAUGE_HELP = {
    "wait_upper_bound_seconds": "The longest remaining live lease.",
    "elapsed_seconds": "Seconds since the drain started.",
    "deadline_seconds": "When the drain gives up, in seconds from its start.",
    "running": "1 while the drain runs, 0 once it is over.",
    "exit_status": "The drain's exit status once over (0 drained, 75 deadline reached, "
    "1 failed); -1 while it runs.",
    "paused_intake": "Intake pauses this drain holds right now (pg_cron jobs, commands).",
    "last_update_timestamp_seconds": "When these metrics were written (Unix time); an old "
    "value means a stuck writer.",
}


def _gauges(row: dict[str, Any], updated_at: float) -> dict[str, float]:
    return {
        "wait_upper_bound_seconds": row["wait_upper_bound_s"],
        "elapsed_seconds": row["elapsed_s"],
        "deadline_seconds": row["deadline_s"],
        "running": row["state"] == RUNNING,
        "exit_status": -1 if row["exit_status"] is None else row["exit_status"],
        "paused_intake": len(row["paused_intake"]),
        "last_update_timestamp_seconds": updated_at,
    }


def render_metrics(snapshot: dict[str, Any]) -> str:
    """The snapshot as Prometheus text: HELP/TYPE once per metric, one sample per host."""
    rows = snapshot["drains"]
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[Any, Any]]) -> None:
        full = f"leaseguard_drain_{name}"
        out.extend((f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"))
        out.extend(f"{full}{_labels(labels)} {_number(value)}" for labels, value in samples)

    for name, text in _COUNTER_HELP.items():
        metric(
            f"{name}_total",
            "counter",
            text,
            [({"host": r["host"]}, r["counters"][name]) for r in rows],
        )
    errors = [
        ({"host": row["host"], "type": kind}, n)
        for row in rows
        for kind, n in sorted(row["counters"]["errors"].items())
    ]
    metric("errors_total", "counter", "Failed polls, by exception class name.", errors)
    claims = [
        ({"host": r["host"], "class": c}, r["counts"][c]) for r in rows for c in COUNT_CLASSES
    ]
    metric("claims", "gauge", "Claimed or queued rows at the last poll, by class.", claims)
    gauges = [(row["host"], _gauges(row, snapshot["updated_at_unix"])) for row in rows]
    for name, text in _GAUGE_HELP.items():
        metric(name, "gauge", text, [({"host": host}, values[name]) for host, values in gauges])
    return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{key}="{escape(str(value))}"' for key, value in labels.items()) + "}"


def _number(value: float) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)
