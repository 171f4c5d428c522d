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
from pathlib import Path
from typing import Any

from leaseguard.core.errors import ConfigError
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.drain import DrainObserver, DrainResult, DrainState
from leaseguard.orchestration.drain_metrics import render_metrics
from leaseguard.orchestration.drain_snapshot import (
    FINISHED,
    INTERRUPTED,
    RUNNING,
    HostDrain,
    build_snapshot,
)
from leaseguard.orchestration.drain_status_read import process_start_ticks
from leaseguard.orchestration.snapshot_files import atomic_write

log = logging.getLogger("leaseguard.drain")


def paused_intake(intake: object) -> list[str]:
    """What an intake says it paused, when it says so (`paused_intake()`); else nothing."""
    describe = getattr(intake, "paused_intake", None)
    return [str(name) for name in describe()] if callable(describe) else []


class HostObserver(DrainObserver):
    """The Drainer's observer for one host: updates its row, then rewrites the files."""

    def __init__(self, board: StatusBoard, row: HostDrain, intake: object = None) -> None:
        self.board = board
        self.row = row
        self.intake = intake

    def after_poll(self, state: DrainState) -> None:
        with self.board.lock:
            self.row.take_state(state)
            self.row.paused_intake = paused_intake(self.intake)
        self.board.publish()

    def finished(self, result: DrainResult | None) -> None:
        """The drain is over; None: it ended by an exception (an interrupt, a crash)."""
        with self.board.lock:
            if result is None:
                self.row.state, self.row.decision, self.row.exit_status = (
                    INTERRUPTED,
                    Decision.FAILED.value,
                    1,
                )
            else:
                self.row.take_state(result)
                self.row.state = FINISHED
                self.row.decision = result.decision.value
                self.row.exit_status = result.exit_status
            self.row.paused_intake = paused_intake(self.intake)
        self.board.publish()


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
        """Rewrite both files now, under the board's lock (so an older snapshot never
        overwrites a newer one); a failed write never stops the drain: it is logged once."""
        if not self.enabled:
            return
        with self.lock:
            snapshot = self.snapshot()
            final = snapshot["state"] != RUNNING
            if self.status_path is not None:
                self._write(self.status_path, json.dumps(snapshot, indent=1) + "\n", final)
            if self.metrics_path is not None:
                self._write(self.metrics_path, render_metrics(snapshot), final)

    def _write(self, path: Path, text: str, final: bool = False) -> None:
        try:
            atomic_write(path, text)
        except OSError as exc:
            if final and path.exists():  # a file saying `running` would outlive the drain
                self._write_last(path, text, exc)
            else:
                self._warn_once(path, exc)
            return
        if str(path) in self._failing:
            self._failing.discard(str(path))
            log.info("drain status written again path=%s", path)

    def _warn_once(self, path: Path, exc: OSError) -> None:
        if str(path) not in self._failing:
            self._failing.add(str(path))
            log.warning(
                "drain status not written reason=status_write_failed path=%s exc_type=%s",
                path,
                type(exc).__name__,
            )

    def _write_last(self, path: Path, text: str, exc: OSError) -> None:
        """The final snapshot on a full (or failing) filesystem: over the old file's own
        space, emptied first; failing that, no file rather than one saying `running`."""
        try:
            with path.open("r+", encoding="utf-8") as handle:
                handle.truncate(0)
                handle.write(text)
            self._warn_once(path, exc)
            log.info("drain status written in place at the end path=%s", path)
        except OSError as last:
            with contextlib.suppress(OSError):
                path.unlink()
            log.error(
                "drain status not written at the end reason=status_write_failed path=%s "
                "exc_type=%s; the stale file was removed so that it does not say running",
                path,
                type(last).__name__,
            )
