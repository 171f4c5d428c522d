"""A real `leaseguard drain` (real PostgreSQL) watched from another process.

`leaseguard status PATH --json` runs as its own process while the drain waits, and the
metrics file is read with prometheus_client's text parser; the stale case comes from a
drain killed with SIGKILL, which cannot write its own end.
"""

import contextlib
import json
import signal
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from leaseguard.orchestration.drain import COUNTER_NAMES
from sandbox.subprocess_env import clean_env
from tests.integration.test_cli_drain import drain_argv
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def status(path):
    """`leaseguard status PATH --json` in a separate process: (exit status, JSON)."""
    done = subprocess.run(
        [sys.executable, "-m", "leaseguard", "status", str(path), "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def polls(path):
    code, found = status(path)
    return found["counters"]["polls"] if code == 0 else -1


def samples(path):
    text = path.read_text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def drain_files(tmp_path):
    return tmp_path / "drain.json", tmp_path / "drain.prom"


def start_drain(db, status_file, metrics_file, *extra):
    return subprocess.Popen(
        drain_argv(
            db,
            "--poll-s",
            "0.1",
            "--status-file",
            str(status_file),
            "--metrics-file",
            str(metrics_file),
            *extra,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def test_the_snapshot_moves_while_the_drain_waits_and_says_finished_after(busy, drain_files):
    status_file, metrics_file = drain_files
    proc = start_drain(busy, status_file, metrics_file)
    try:
        assert wait_until(lambda: polls(status_file) >= 2)
        code, first = status(status_file)
        assert code == 0 and first["state"] == "running"
        assert first["pid"] == proc.pid and first["scope"] == "process_lifetime"
        assert first["decision"] == "defer" and first["counts"]["live"] == 1
        assert first["counts"]["queued"] == 1
        assert 0 < first["wait_upper_bound_s"] <= 7200 - 30 * 60
        # the deadline is the longest lease seen at the start; the lease shrinks since
        assert first["wait_upper_bound_s"] <= first["deadline_s"] <= 7200 - 30 * 60
        assert wait_until(lambda: polls(status_file) >= first["counters"]["polls"] + 3)
        code, second = status(status_file)
        assert code == 0 and second["state"] == "running"
        assert second["counters"]["idle_polls"] > first["counters"]["idle_polls"]
        assert second["elapsed_s"] > first["elapsed_s"]
        assert second["updated_at"] > first["updated_at"]
        host = (("host", second["hosts"][0]),)
        running = samples(metrics_file)
        assert running[("leaseguard_drain_running", host)] == 1
        assert running[("leaseguard_drain_claims", (("class", "live"), *host))] == 1
        assert running[("leaseguard_drain_polls_total", host)] >= 2
        with busy.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr
    code, final = status(status_file)
    assert code == 0
    assert (final["state"], final["decision"], final["exit_status"]) == ("finished", "proceed", 0)
    assert final["counters"]["leases_ended"] == 1 and final["counts"]["live"] == 0
    assert final["counters"]["polls"] > second["counters"]["polls"]
    assert all(isinstance(final["counters"][n], int) for n in COUNTER_NAMES)
    assert final["counters"]["errors"] == {}
    done = samples(metrics_file)
    assert done[("leaseguard_drain_running", host)] == 0
    assert done[("leaseguard_drain_exit_status", host)] == 0
    assert done[("leaseguard_drain_leases_ended_total", host)] == 1
    assert done[("leaseguard_drain_polls_total", host)] == final["counters"]["polls"]
    assert sorted(p.name for p in status_file.parent.iterdir()) == ["drain.json", "drain.prom"]


def test_a_drain_killed_outright_leaves_a_stale_status(busy, drain_files):
    status_file, metrics_file = drain_files
    proc = start_drain(busy, status_file, metrics_file)
    try:
        assert wait_until(lambda: polls(status_file) >= 1)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    code, found = status(status_file)
    assert code == 1
    assert found["available"] is False
    assert found["reason"] == (f"stale: writer pid {proc.pid} is gone and the drain did not finish")
    text = subprocess.run(
        [sys.executable, "-m", "leaseguard", "status", str(status_file)],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert text.returncode == 1 and text.stderr == ""
    assert text.stdout.startswith("available=false reason=")


def test_a_deadline_reached_is_finished_with_exit_75(busy, drain_files):
    status_file, metrics_file = drain_files
    proc = start_drain(busy, status_file, metrics_file, "--deadline-s", "0.5")
    proc.communicate(timeout=60)
    assert proc.returncode == 75
    code, final = status(status_file)
    assert code == 0
    assert (final["state"], final["decision"], final["exit_status"]) == ("finished", "defer", 75)


def test_no_status_file_is_unavailable_and_exits_1(tmp_path):
    code, found = status(tmp_path / "never-written.json")
    assert code == 1
    assert found == {
        "available": False,
        "reason": "no status file (no drain has written one here)",
        "path": str(tmp_path / "never-written.json"),
    }


def test_a_status_file_in_a_missing_directory_is_a_usage_error(busy, tmp_path):
    done = subprocess.run(
        drain_argv(busy, "--status-file", str(tmp_path / "nowhere" / "drain.json")),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot write" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def small_fs(tmp_path):
    """A 256 KiB tmpfs of its own (a real filesystem that fills up), unmounted after."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder):
    """Write until the filesystem says it is full (ENOSPC)."""
    with (folder / "filler").open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"x" * 4096)


def test_a_drain_that_ends_on_a_full_filesystem_never_leaves_a_file_saying_running(busy, small_fs):
    status_file, metrics_file = small_fs / "drain.json", small_fs / "drain.prom"
    proc = start_drain(busy, status_file, metrics_file)
    try:
        assert wait_until(lambda: polls(status_file) >= 2)
        fill(small_fs)
        with busy.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "drain status not written reason=status_write_failed" in stderr  # said, once
    code, found = status(status_file)
    # The last snapshot went into the old file's own space: finished, not a stale running.
    assert (code, found["state"], found["decision"]) == (0, "finished", "proceed"), found


def test_a_drain_that_fails_before_it_begins_says_finished_failed_not_running(busy, drain_files):
    # The session failed (a host's facts unreadable): the file said `running` with no host,
    # and `leaseguard status` called it stale ("the drain did not finish").
    status_file, _ = drain_files
    argv = [sys.executable, "-m", "leaseguard", "drain", "--dsn", busy.dsn]
    argv += ["--host-facts", "app1=x", "--status-file", str(status_file)]
    done = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 1, done.stderr
    code, final = status(status_file)
    assert code == 0, final
    assert (final["state"], final["decision"], final["exit_status"]) == ("finished", "failed", 1)
    assert final["counters"]["polls"] == 0
