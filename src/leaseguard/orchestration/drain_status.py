"""A drain's `--status-file` (JSON, read by `leaseguard status`) and `--metrics-file`
(Prometheus text), rewritten atomically after every poll; errors as class names only."""

import contextlib
import copy
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from leaseguard.adapters.pauses import process_alive, process_start_ticks
from leaseguard.core.errors import ConfigError, LeaseguardError
from leaseguard.orchestration.drain import COUNTER_NAMES, DrainCounters, DrainResult
from leaseguard.orchestration.intake import Intakes

log = logging.getLogger("leaseguard.drain")

SCOPE = "process_lifetime"
RUNNING, FINISHED, INTERRUPTED = "running", "finished", "interrupted"
COUNT_CLASSES = ("live", "stale", "orphaned", "queued")
_WORST_FIRST = ("failed", "defer", "pending", "proceed")  # decisions
_LONGEST = ("wait_upper_bound_s", "elapsed_s", "deadline_s")  # the fleet's: its longest
_ESCAPED = str.maketrans({"\\": "\\\\", "\n": "\\n", '"': '\\"'})  # in a metric's label


def _seconds(value: float | None) -> float:
    return round(max(float(value or 0.0), 0.0), 3)


class HostObserver:
    """One host's row of the board, updated after every poll, then the files rewritten."""

    def __init__(self, board: "StatusBoard", row: dict[str, Any], intake: Intakes | None) -> None:
        self.board, self.row, self.intake = board, row, intake

    def finished(self, result: DrainResult | None, *, stopped: bool = False) -> None:
        if result is None or stopped:  # ended by an exception (a crash) or a signal
            self.after_poll(result, state=INTERRUPTED, decision="failed", exit_status=1)
        else:
            ended = {"decision": result.decision.value, "exit_status": result.exit_status}
            self.after_poll(result, state=FINISHED, **ended)

    def after_poll(self, result: DrainResult | None, /, **ended: Any) -> None:
        board, row = self.board, self.row
        with board.lock:
            if result is not None and (verdict := result.verdict) is not None:
                row["counts"] = {k: max(int(n), 0) for k, n in vars(verdict.counts).items()}
                row["wait_upper_bound_s"] = _seconds(verdict.wait_upper_bound_s)
                row["decision"] = verdict.decision.value
            if result is not None:
                row["counters"] = result.counters.snapshot()
                row["elapsed_s"] = _seconds(result.elapsed_s)
                row["deadline_s"] = _seconds(result.deadline_s)
            row.update(ended, paused_intake=self.intake.paused_intake() if self.intake else [])
            if board.status_path is None and board.metrics_path is None:  # no snapshot per poll
                return
            snapshot = board.snapshot()
            for path, text in board._texts(snapshot, indent=1):
                board._write(path, text, final=snapshot["state"] != RUNNING)


class StatusBoard:
    """One drain process's snapshot over its hosts, every write under the lock (threads); its
    first snapshot written at once: a path that cannot take it fails before any pause."""

    def __init__(self, status_file: str | Path | None, metrics_file: str | Path | None) -> None:
        self.status_path = Path(status_file) if status_file else None
        self.metrics_path = Path(metrics_file) if metrics_file else None
        self.lock = threading.RLock()
        self.rows: dict[str, dict[str, Any]] = {}
        self.started_at = datetime.now(UTC)
        self.pid_started = process_start_ticks(os.getpid())
        self._failing: set[Path] = set()
        self._databases: dict[str, object] = {}  # host -> its database, when shared with others
        for path, text in self._texts(self.snapshot()):
            try:
                atomic_write(path, text)
            except OSError as exc:
                raise ConfigError(
                    f"cannot write {path} ({type(exc).__name__}): the drain needs its directory "
                    "to exist and be writable"
                ) from None

    def observer(
        self, host: str, intake: Intakes | None = None, *, database: object = None
    ) -> HostObserver:
        """`database`: hosts judged against one database (it names them) see the same claims."""
        new: dict[str, Any] = {"host": host, "state": RUNNING, "decision": "pending"}
        new |= {"exit_status": None, "counts": dict.fromkeys(COUNT_CLASSES, 0)}
        new |= {**dict.fromkeys(_LONGEST, 0.0), "paused_intake": []}  # the row's keys in order
        new["counters"] = DrainCounters().snapshot()
        with self.lock:
            row = self.rows.setdefault(host, new)
            if database is not None:
                self._databases[host] = database
        return HostObserver(self, row, intake)

    def not_drained(self, host: str, error: LeaseguardError | None, *, stopped: bool) -> None:
        """A host whose drain never began (a failed session, a signal): failed, not `running`."""
        if host not in self.rows:
            result = None if error is None else DrainResult(None, DrainCounters(), 0.0, 0.0, error)
            self.observer(host).finished(result, stopped=stopped)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            rows = copy.deepcopy(list(self.rows.values()))
            databases = [self._databases.get(row["host"], row["host"]) for row in rows]
        # Hosts sharing a database see its claims each: a database counts as the most any of its
        # hosts sees (50 hosts seeing one live claim: live=1), then the databases are summed.
        most: dict[object, Counter[str]] = {}
        for row, database in zip(rows, databases, strict=True):  # `|`: each class's greater
            most[database] = Counter[str](row["counts"]) | most.get(database, Counter())
        updated_at = datetime.now(UTC)
        errors = sum((Counter(row["counters"]["errors"]) for row in rows), Counter[str]())
        states, exits = {r["state"] for r in rows}, {r["exit_status"] for r in rows} - {None}
        state = next((s for s in (RUNNING, INTERRUPTED) if s in states or not rows), FINISHED)
        decisions = {row["decision"] for row in rows}
        ended = next((e for e in (1, 75) if e in exits), 0 if exits else None)
        return {
            "available": True,
            "scope": SCOPE,
            "state": state,
            "pid": os.getpid(),
            "pid_started": self.pid_started,
            "hosts": [row["host"] for row in rows],
            "decision": next((d for d in _WORST_FIRST if d in decisions), "pending"),
            "exit_status": None if state == RUNNING else ended,
            "counts": {name: sum(seen[name] for seen in most.values()) for name in COUNT_CLASSES},
            **{k: max((r[k] for r in rows), default=0.0) for k in _LONGEST},
            "paused_intake": sorted({name for row in rows for name in row["paused_intake"]}),
            "counters": {
                **{name: sum(row["counters"][name] for row in rows) for name in COUNTER_NAMES},
                "errors": dict(sorted(errors.items())),
            },
            "started_at": self.started_at.isoformat(timespec="milliseconds"),
            "updated_at": updated_at.isoformat(timespec="milliseconds"),
            "updated_at_unix": round(updated_at.timestamp(), 3),
            "drains": rows,
        }

    def _texts(self, snapshot: dict[str, Any], indent: int | None = None) -> list[tuple[Path, str]]:
        status = json.dumps(snapshot, indent=indent) + ("\n" if indent else "")
        texts = [(self.status_path, status), (self.metrics_path, render_metrics(snapshot))]
        return [(path, text) for path, text in texts if path is not None]

    def _write(self, path: Path, text: str, final: bool) -> None:
        """A failed write never stops the drain: it is logged once."""
        try:
            atomic_write(path, text)
        except OSError as exc:
            in_place = final and path.exists()  # a file saying `running` must not outlive us
            if in_place:
                try:  # the final snapshot over the old file's own space, emptied first
                    path.write_text(text, encoding="utf-8")
                except OSError as last:  # then no file rather than one saying `running`
                    with contextlib.suppress(OSError):
                        path.unlink()
                    log.error(
                        "drain status not written at the end reason=status_write_failed "
                        f"path={path} exc_type={type(last).__name__}; the stale file was "
                        "removed so that it does not say running"
                    )
                    return
            if path not in self._failing:
                self._failing.add(path)
                log.warning(
                    "drain status not written reason=status_write_failed "
                    f"path={path} exc_type={type(exc).__name__}"
                )
            if in_place:
                log.info("drain status written in place at the end path=%s", path)
            return
        if path in self._failing:
            self._failing.discard(path)
            log.info("drain status written again path=%s", path)


def atomic_write(path: Path, text: str) -> None:
    """A temp file renamed over `path`: `.tmp` (node_exporter ignores it), 0644 minus umask."""
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


_HELP = {
    "polls_total": "Polls of the claim table made by this drain.",
    "idle_polls_total": "Polls that changed nothing (no lease ended, no claim appeared).",
    "live_count_changes_total": "Polls after which the number of live claims differed.",
    "leases_ended_total": "Live claims seen to end during this drain.",
    "claims_appeared_total": "Live claims that appeared during this drain.",
    "errors_total": "Failed polls, by exception class name.",
    "claims": "Claimed or queued rows at the last poll, by class.",
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


def render_metrics(snapshot: dict[str, Any]) -> str:
    """The snapshot as Prometheus text: HELP/TYPE once per metric, one sample per host."""
    out: list[str] = []
    for name, help_text in _HELP.items():
        full = f"leaseguard_drain_{name}"
        kind = "counter" if name.endswith("_total") else "gauge"
        out += [f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"]
        for row in snapshot["drains"]:
            for labels, value in _samples(name, row, snapshot["updated_at_unix"]):
                pairs = {"host": row["host"], **labels}.items()
                text = ",".join(f'{key}="{str(value).translate(_ESCAPED)}"' for key, value in pairs)
                number = float(value)
                out.append(f"{full}{{{text}}} {int(number) if number.is_integer() else number!r}")
    return "\n".join(out) + "\n"


def _samples(name: str, row: dict[str, Any], updated_at: float) -> list[tuple[dict[str, str], Any]]:
    if name == "errors_total":
        return [({"type": kind}, n) for kind, n in sorted(row["counters"]["errors"].items())]
    if name == "claims":
        return [({"class": c}, row["counts"][c]) for c in COUNT_CLASSES]
    if name.endswith("_total"):
        return [({}, row["counters"][name.removesuffix("_total")])]
    value = {
        "wait_upper_bound_seconds": row["wait_upper_bound_s"],
        "elapsed_seconds": row["elapsed_s"],
        "deadline_seconds": row["deadline_s"],
        "running": row["state"] == RUNNING,
        "exit_status": -1 if row["exit_status"] is None else row["exit_status"],
        "paused_intake": len(row["paused_intake"]),
        "last_update_timestamp_seconds": updated_at,
    }[name]
    return [({}, value)]


def read_status(path: str | Path) -> dict[str, Any]:
    """The snapshot at `path`, or `available: false` with a `reason`."""
    path = Path(path)

    def unavailable(reason: str) -> dict[str, Any]:
        return {"available": False, "reason": reason, "path": str(path)}

    try:
        snapshot = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return unavailable("no status file (no drain has written one here)")
    except (OSError, UnicodeDecodeError) as exc:
        return unavailable(f"status file unreadable ({type(exc).__name__})")
    except ValueError:
        return unavailable("status file is not valid JSON")
    shape = "status file is not a leaseguard drain status ({})"
    if not isinstance(snapshot, dict):
        return unavailable(shape.format("not an object"))
    if snapshot.get("available") is not True or snapshot.get("scope") != SCOPE:
        return unavailable(shape.format("no available/scope"))
    if snapshot.get("state") not in (RUNNING, FINISHED, INTERRUPTED):
        return unavailable(shape.format("unknown state"))
    if type(pid := snapshot.get("pid")) is not int or pid <= 0:  # a bool is no pid
        return unavailable(shape.format("no writer pid"))
    if not isinstance(counters := snapshot.get("counters"), dict) or not all(
        type(n := counters.get(name)) is int and n >= 0 for name in COUNTER_NAMES
    ):
        return unavailable(shape.format("counters missing or negative"))
    started = snapshot.get("pid_started")
    if snapshot["state"] == RUNNING and not process_alive(  # the same process, not a reused pid
        pid, started if isinstance(started, int) else None
    ):
        stale = f"stale: writer pid {pid} is gone and the drain did not finish"
        return {**unavailable(stale), "last_snapshot": {**snapshot, "available": False}}
    return {**snapshot, "path": str(path)}


def status_line(status: Mapping[str, Any]) -> str:
    """`leaseguard status` without --json: one line."""
    if not status.get("available"):
        return f"available=false reason={json.dumps(status['reason'])} path={status['path']}"
    counters = status["counters"]
    errors = ",".join(f"{kind}:{n}" for kind, n in counters["errors"].items()) or "-"
    fields = [
        f"state={status['state']} hosts={','.join(status['hosts']) or '-'}",
        f"decision={status['decision']}",
        *([f"exit_status={status['exit_status']}"] if status["exit_status"] is not None else []),
        " ".join(f"{name}={n}" for name, n in status["counts"].items()),
        f"wait_upper_bound_s={status['wait_upper_bound_s']:g}",
        f"elapsed_s={status['elapsed_s']:g}/{status['deadline_s']:g}",
        f"paused_intake={','.join(status['paused_intake']) or '-'}",
        *(f"{name}={counters[name]}" for name in COUNTER_NAMES),
        f"errors={errors} pid={status['pid']} updated_at={status['updated_at']}",
    ]
    return " ".join(fields)
