"""`make demo` end to end: the story comes true and nothing is left running afterwards."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.netns import pids_with_cmdline_containing
from sandbox.subprocess_env import clean_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.py"


@pytest.fixture
def demo_dir():
    # Short and under /tmp: the sandbox's unix sockets live in it (at most 107 bytes a path).
    path = Path("/tmp") / f"lgdemo-test-{secrets.token_hex(4)}"
    yield path
    assert not path.exists(), f"the demo left {path} behind"


def test_the_demo_plays_every_step_and_leaves_nothing_running(demo_dir, tmp_path):
    record = tmp_path / "demo-sandbox"
    bin_dir = REPO / ".venv" / "bin"
    done = subprocess.run(
        [sys.executable, str(DEMO), "--workdir", str(demo_dir), "--record", str(record)],
        cwd=REPO,
        env=clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "every step came true" in done.stdout
    for step in ("=== 1. ", "=== 2. ", "=== 3. ", "=== 4. "):
        assert step in done.stdout
    assert "demo FAILED" not in output
    assert pids_with_cmdline_containing(str(demo_dir)) == []
    assert not record.exists()


def test_demo_down_without_a_kept_sandbox_is_a_no_op(tmp_path):
    record = tmp_path / "demo-sandbox"
    done = subprocess.run(
        [sys.executable, str(DEMO), "--down", "--record", str(record)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no kept demo sandbox" in done.stdout
