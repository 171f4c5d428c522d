"""Reading a drain's status file back (`leaseguard status`): the snapshot, or why not.

A file whose writer is gone while it still says `running` is stale; a reused pid is told
apart by the process's start time. drain_status writes the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from leaseguard.orchestration.drain import COUNTER_NAMES

SCOPE = "process_lifetime"
RUNNING, FINISHED, INTERRUPTED = "running", "finished", "interrupted"


def read_status(path: str | Path) -> dict[str, Any]:
    """The snapshot at `path`, or `available: false` with a `reason` (never raises)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _unavailable(path, "no status file (no drain has written one here)")
    except (OSError, UnicodeDecodeError) as exc:
        return _unavailable(path, f"status file unreadable ({type(exc).__name__})")
    try:
        snapshot = json.loads(text)
    except ValueError:
        return _unavailable(path, "status file is not valid JSON")
    problem = _shape_problem(snapshot)
    if problem:
        return _unavailable(path, f"status file is not a leaseguard drain status ({problem})")
    pid = snapshot["pid"]
    if snapshot["state"] == RUNNING and not writer_alive(pid, snapshot.get("pid_started")):
        stale = f"stale: writer pid {pid} is gone and the drain did not finish"
        return {**_unavailable(path, stale), "last_snapshot": {**snapshot, "available": False}}
    return {**snapshot, "path": str(path)}


def _shape_problem(snapshot: Any) -> str | None:
    if not isinstance(snapshot, dict):
        return "not an object"
    if snapshot.get("available") is not True or snapshot.get("scope") != SCOPE:
        return "no available/scope"
    if snapshot.get("state") not in (RUNNING, FINISHED, INTERRUPTED):
        return "unknown state"
    pid = snapshot.get("pid")
    if not _whole(pid) or pid <= 0:
        return "no writer pid"
    counters = snapshot.get("counters")
    if not isinstance(counters, dict) or not all(
        _whole(n := counters.get(name)) and n >= 0 for name in COUNTER_NAMES
    ):
        return "counters missing or negative"
    return None


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _unavailable(path: Path, reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason, "path": str(path)}


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
