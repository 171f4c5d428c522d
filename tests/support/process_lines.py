"""A child process's output read line by line in a thread, so a test can wait for one line."""

from __future__ import annotations

import threading
import time


class Lines:
    """A process's output, read line by line in a thread, so a test can wait for one."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, text: str, timeout_s: float = 60) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def text(self) -> str:
        self._thread.join(timeout=60)
        return "".join(self.lines)
