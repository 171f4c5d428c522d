"""`python -m leaseguard ARGS` as a user runs it: a clean environment, output captured."""

import subprocess
import sys

from sandbox.subprocess_env import clean_env


def leaseguard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leaseguard", *args],
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        timeout=60,
        check=False,
    )
