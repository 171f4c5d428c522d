"""A running drain, observable from outside: a JSON status snapshot and Prometheus metrics.

A drain may wait for hours while logging nothing (idle polls are silent at INFO). Its other
half is a fresh snapshot another process can read at any time: `--status-file` (JSON, read
back by `leaseguard status`) and `--metrics-file` (the Prometheus text format, for
node_exporter's textfile collector). Both are rewritten after every poll by writing a temp
file in the same directory and renaming it over the old one, so a reader never sees half a
file. No fsync: a snapshot only matters while its writer lives, and a reader judges a file
whose writer is gone as stale anyway.

Nothing here carries a message text: errors appear as exception class names only, so a
driver error that echoes a DSN or a password cannot leak into either file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from leaseguard.core.errors import ConfigError
from leaseguard.core.verdict import Verdict
from leaseguard.orchestration.drain import DrainCounters, DrainResult

log = logging.getLogger("leaseguard.drain")

SCOPE = "process_lifetime"
RUNNING, FINISHED, INTERRUPTED = "running", "finished", "interrupted"
COUNTER_NAMES = ("polls", "idle_polls", "live_count_changes", "leases_ended", "claims_appeared")
COUNT_CLASSES = ("live", "stale", "orphaned", "queued")
_WORST_FIRST = ("failed", "defer", "pending", "proceed")


# --- one host's drain, as the Drainer reports it ------------------------------------------


@dataclass
class HostDrain:
    """What one host's drain looks like right now (a row of the snapshot)."""

    host: str
    state: str = RUNNING
    decision: str = "pending"
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_CLASSES, 0))
    wait_upper_bound_s: float = 0.0
    elapsed_s: float = 0.0
    deadline_s: float = 0.0
    paused_intake: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))
    errors: dict[str, int] = field(default_factory=dict)
    exit_status: int | None = None

    def take_counters(self, counters: DrainCounters) -> None:
        snapshot = counters.snapshot()
        self.counters = {name: _count(snapshot[name]) for name in COUNTER_NAMES}
        self.errors = {str(kind): _count(n) for kind, n in counters.errors.items()}

    def take_verdict(self, verdict: Verdict) -> None:
        self.counts = {name: _count(n) for name, n in verdict.counts.as_dict().items()}
        self.wait_upper_bound_s = _seconds(verdict.wait_upper_bound_s)
        self.decision = verdict.decision.value

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "state": self.state,
            "decision": self.decision,
            "exit_status": self.exit_status,
            "counts": dict(self.counts),
            "wait_upper_bound_s": self.wait_upper_bound_s,
            "elapsed_s": self.elapsed_s,
            "deadline_s": self.deadline_s,
            "paused_intake": list(self.paused_intake),
            "counters": {**self.counters, "errors": dict(self.errors)},
        }


def _count(value: Any) -> int:
    return max(int(value), 0)


def _seconds(value: float | None) -> float:
    return round(max(float(value or 0.0), 0.0), 3)


def paused_intake(intake: object) -> list[str]:
    """What an intake says it paused, when it says so (`paused_intake()`); else nothing."""
    describe = getattr(intake, "paused_intake", None)
    return [str(name) for name in describe()] if callable(describe) else []


class HostObserver:
    """The Drainer's observer for one host: updates its row, then rewrites the files."""

    def __init__(self, board: StatusBoard, row: HostDrain, intake: object = None) -> None:
        self.board = board
        self.row = row
        self.intake = intake

    def after_poll(
        self,
        verdict: Verdict | None,
        counters: DrainCounters,
        elapsed_s: float,
        deadline_s: float,
    ) -> None:
        with self.board.lock:
            if verdict is not None:
                self.row.take_verdict(verdict)
            self.row.take_counters(counters)
            self.row.elapsed_s = _seconds(elapsed_s)
            self.row.deadline_s = _seconds(deadline_s)
            self.row.paused_intake = paused_intake(self.intake)
        self.board.publish()

    def finished(self, result: DrainResult | None) -> None:
        """The drain is over; None: it ended by an exception (an interrupt, a crash)."""
        with self.board.lock:
            if result is None:
                self.row.state, self.row.decision, self.row.exit_status = INTERRUPTED, "failed", 1
            else:
                if result.verdict is not None:
                    self.row.take_verdict(result.verdict)
                self.row.take_counters(result.counters)
                self.row.elapsed_s = _seconds(result.elapsed_s)
                self.row.deadline_s = _seconds(result.deadline_s)
                self.row.state = FINISHED
                self.row.decision = result.as_dict()["decision"]
                self.row.exit_status = result.exit_status
            self.row.paused_intake = paused_intake(self.intake)
        self.board.publish()
        self.board.flush()  # the process may exit right after: the last state must be on disk


class _BackgroundWriter:
    """Writes the newest text of each file off the poll loop; an older one never wins."""

    def __init__(self, write: Callable[[Path, str], None]) -> None:
        self._write = write
        self._cond = threading.Condition()
        self._pending: dict[Path, str] = {}
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, texts: dict[Path, str]) -> None:
        with self._cond:
            self._pending.update(texts)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="leaseguard-drain-status", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._pending and not self._busy, timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                batch, self._pending, self._busy = self._pending, {}, True
            try:
                for path, text in batch.items():
                    self._write(path, text)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


# --- the whole drain (one or several hosts), and its two files ----------------------------


class StatusBoard:
    """The snapshot of one drain process over its host(s), written to the files asked for.

    Several hosts (`fab -H app1,app2 drain`) drain in threads and share one board, so the
    files always hold every host; each write happens under the board's lock.
    """

    def __init__(
        self,
        status_file: str | Path | None,
        metrics_file: str | Path | None,
        *,
        wall_clock: Any = time.time,
    ) -> None:
        self.status_path = Path(status_file) if status_file else None
        self.metrics_path = Path(metrics_file) if metrics_file else None
        self.lock = threading.RLock()
        self.rows: dict[str, HostDrain] = {}
        self.wall_clock = wall_clock
        self.started_at = wall_clock()
        self.pid = os.getpid()
        self.pid_started = process_start_ticks(self.pid)
        self._failing: set[str] = set()
        self._writer = _BackgroundWriter(self._write)

    @property
    def enabled(self) -> bool:
        return self.status_path is not None or self.metrics_path is not None

    def observer(self, host: str, intake: object = None) -> HostObserver:
        """The observer for one host's Drainer; its row appears in the files at once."""
        with self.lock:
            row = self.rows.setdefault(host, HostDrain(host))
        return HostObserver(self, row, intake)

    def check_writable(self) -> None:
        """Write the first snapshot now: a path that cannot take it fails before any pause.

        It also replaces a previous drain's file at once, so a reader never mistakes an old
        `finished` for this drain.
        """
        for path in (self.status_path, self.metrics_path):
            if path is None:
                continue
            try:
                snapshot = self.snapshot()
                is_status = path == self.status_path
                atomic_write(path, json.dumps(snapshot) if is_status else render_metrics(snapshot))
            except OSError as exc:
                raise ConfigError(
                    f"cannot write {path} ({type(exc).__name__}): the drain needs its directory "
                    "to exist and be writable"
                ) from None

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            rows = [row.as_dict() for row in self.rows.values()]
        return build_snapshot(
            rows,
            pid=self.pid,
            pid_started=self.pid_started,
            started_at=self.started_at,
            updated_at=self.wall_clock(),
        )

    def publish(self) -> None:
        """Rewrite both files (soon, on the writer thread); a failed write never stops the
        drain: it is logged once."""
        if not self.enabled:
            return
        texts: dict[Path, str] = {}
        with self.lock:
            snapshot = self.snapshot()
            if self.status_path is not None:
                texts[self.status_path] = json.dumps(snapshot, indent=1) + "\n"
            if self.metrics_path is not None:
                texts[self.metrics_path] = render_metrics(snapshot)
            self._writer.submit(texts)

    def flush(self) -> None:
        """Wait until what was published is on disk (or could not be written)."""
        self._writer.flush()

    def _write(self, path: Path, text: str) -> None:
        try:
            atomic_write(path, text)
        except OSError as exc:
            if str(path) not in self._failing:
                self._failing.add(str(path))
                log.warning(
                    "drain status not written reason=status_write_failed path=%s exc_type=%s",
                    path,
                    type(exc).__name__,
                )
            return
        if str(path) in self._failing:
            self._failing.discard(str(path))
            log.info("drain status written again path=%s", path)


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


# --- writing files atomically -------------------------------------------------------------


def atomic_write(path: Path, text: str) -> None:
    """Write a temp file beside `path`, then rename it over `path` (readers see old or new).

    The temp name ends in `.tmp`, which node_exporter's textfile collector ignores (it reads
    `*.prom` only); the mode is 0644 minus the umask, so a collector running as another
    user can read the result.
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


# --- Prometheus text exposition format ----------------------------------------------------

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


# --- reading the status file back (`leaseguard status`) -----------------------------------


def read_status(path: str | Path) -> dict[str, Any]:
    """The snapshot at `path`, or `available: false` with a `reason` (never raises)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return unavailable(path, "no status file (no drain has written one here)")
    except (OSError, UnicodeDecodeError) as exc:
        return unavailable(path, f"status file unreadable ({type(exc).__name__})")
    try:
        snapshot = json.loads(text)
    except ValueError:
        return unavailable(path, "status file is not valid JSON")
    problem = _shape_problem(snapshot)
    if problem:
        return unavailable(path, f"status file is not a leaseguard drain status ({problem})")
    if snapshot["state"] == RUNNING and not writer_alive(
        snapshot["pid"], snapshot.get("pid_started")
    ):
        return unavailable(
            path,
            f"stale: writer pid {snapshot['pid']} is gone and the drain did not finish",
            last=snapshot,
        )
    return {**snapshot, "path": str(path)}


def _shape_problem(snapshot: Any) -> str | None:
    if not isinstance(snapshot, dict):
        return "not an object"
    if snapshot.get("available") is not True or snapshot.get("scope") != SCOPE:
        return "no available/scope"
    if snapshot.get("state") not in (RUNNING, FINISHED, INTERRUPTED):
        return "unknown state"
    pid = snapshot.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return "no writer pid"
    counters = snapshot.get("counters")
    if not isinstance(counters, dict) or not all(
        _non_negative(counters.get(name)) for name in COUNTER_NAMES
    ):
        return "counters missing or negative"
    return None


def _non_negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def unavailable(path: Path, reason: str, last: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"available": False, "reason": reason, "path": str(path)}
    if last is not None:
        found["last_snapshot"] = {**last, "available": False}
    return found


def writer_alive(pid: int, started: Any = None) -> bool:
    """Whether the writing process still runs (and is the same process, not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        pass
    if isinstance(started, int):
        now = process_start_ticks(pid)
        return now is None or now == started
    return True


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell reused pids."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[19])  # field 22 of stat(5); fields here start at field 3
    except (IndexError, ValueError):
        return None


def status_line(status: Mapping[str, Any]) -> str:
    """`leaseguard status` without --json: one line, as the timeline lines read."""
    if not status.get("available"):
        return f"available=false reason={json.dumps(status['reason'])} path={status['path']}"
    counts = " ".join(f"{name}={n}" for name, n in status["counts"].items())
    counters = status["counters"]
    errors = ",".join(f"{kind}:{n}" for kind, n in counters["errors"].items()) or "-"
    fields = [
        f"state={status['state']}",
        f"hosts={','.join(status['hosts']) or '-'}",
        f"decision={status['decision']}",
        *([f"exit_status={status['exit_status']}"] if status["exit_status"] is not None else []),
        counts,
        f"wait_upper_bound_s={status['wait_upper_bound_s']:g}",
        f"elapsed_s={status['elapsed_s']:g}/{status['deadline_s']:g}",
        f"paused_intake={','.join(status['paused_intake']) or '-'}",
        *(f"{name}={counters[name]}" for name in COUNTER_NAMES),
        f"errors={errors}",
        f"pid={status['pid']}",
        f"updated_at={status['updated_at']}",
    ]
    return " ".join(fields)
