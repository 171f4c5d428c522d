"""Waiting for a condition against a deadline: the tests' one way to wait (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout_s: float = 60) -> bool:
    """Poll `condition` until it is truthy or `timeout_s` passes; say which happened."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False
