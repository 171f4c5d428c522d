"""Writing snapshot files atomically: a reader sees the old or the new file, never half of
one."""

from __future__ import annotations

import contextlib
import os
import threading
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
