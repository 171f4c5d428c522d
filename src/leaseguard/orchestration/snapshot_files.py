"""Writing snapshot files: atomically (a reader sees the old or the new file, never half of
one), and off the poll loop on a writer thread."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path


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


class BackgroundWriter:
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
