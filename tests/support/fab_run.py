"""`fab` run as a user runs it: a process of its own from the repository, a clean env."""

import subprocess
import sys
from pathlib import Path

from sandbox.subprocess_env import clean_env

REPO = Path(__file__).resolve().parents[2]


def run_fab(
    *argv: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m fabric ARGV...`, its output captured; never raises on its exit status.

    `env`: variables added to the clean environment (FABRIC_*, SSH_AUTH_SOCK).
    """
    return subprocess.run(
        [sys.executable, "-m", "fabric", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        timeout=timeout,
        check=False,
    )
