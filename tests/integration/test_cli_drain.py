"""`leaseguard drain` against a real PostgreSQL with real pg_cron jobs."""

import json
import signal
import subprocess
import sys
import threading

import pytest
import yaml

from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.support.process_lines import Lines
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

FACTS = ["--task-timeout-s", "3600", "--runtime-started-at", "2000-01-01T00:00:00Z"]


def drain_argv(db, *extra):
    return [sys.executable, "-m", "leaseguard", "drain", "--dsn", db.dsn, *FACTS, *extra]


def run_drain(db, *extra):
    return subprocess.run(
        drain_argv(db, *extra),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


@pytest.fixture
def claim_job(db):
    """A real pg_cron job standing in for the system's claim loop."""
    with db.cluster.connect() as conn:
        conn.execute(
            "SELECT cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s)",
            (f"claim_{db.name}", db.name),
        )
    return f"claim_{db.name}"


def job_active(db, name):
    with db.cluster.connect() as conn:
        row = conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (name,)).fetchone()
    return {True: "t", False: "f"}[row[0]]


def drain_ending_the_claim(db, *extra):
    """Run a drain and end the live claim once the drain has logged its first poll.

    Waiting for the drain's own `start live=1` line (not a fixed delay) keeps the test true
    however long the interpreter takes to start on a loaded machine.
    """
    proc = subprocess.Popen(
        drain_argv(db, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    # Both pipes read by threads: communicate() would also read stderr, taking lines away
    # from the reader that the assertions look at.
    stdout, stderr = Lines(proc.stdout), Lines(proc.stderr)
    try:
        assert stderr.wait_for("start live=1", timeout_s=60), stderr.text()
        with db.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
        proc.wait(timeout=60)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout.text(), stderr.text())


def test_a_claim_released_mid_drain_exits_0_soon_after(busy):
    done = drain_ending_the_claim(busy, "--poll-s", "0.2")
    assert done.returncode == 0, done.stderr
    assert "live 1 -> 0 ended=1" in done.stderr
    assert "decision=proceed" in done.stdout


def test_a_claim_never_released_exits_75_at_the_deadline(busy):
    done = run_drain(busy, "--poll-s", "0.2", "--deadline-s", "1", "--json")
    assert done.returncode == 75
    assert '"drained": false' in done.stdout
    assert '"deadline_s": 1.0' in done.stdout


def test_the_config_files_drain_section_is_read_and_a_flag_wins_over_it(busy, tmp_path):
    """`drain:` in the --config file, as in fabric.yaml; `check` reads the same file."""
    status_file, config = tmp_path / "drain.json", tmp_path / "leaseguard.yaml"
    drain = {"poll_s": 0.2, "deadline_s": 1, "status_file": str(status_file)}
    config.write_text(yaml.safe_dump({"leaseguard": {"table": "execution_runs", "drain": drain}}))
    done = run_drain(busy, "--config", str(config), "--json")
    assert done.returncode == 75, done.stderr
    result = json.loads(done.stdout)
    assert (result["deadline_s"], result["drained"]) == (1.0, False)
    assert result["counters"]["polls"] >= 4  # every 0.2 s, not every 5 s
    assert json.loads(status_file.read_text())["state"] == "finished"
    done = run_drain(busy, "--config", str(config), "--deadline-s", "0.5", "--json")
    assert done.returncode == 75, done.stderr
    assert json.loads(done.stdout)["deadline_s"] == 0.5
    check = [sys.executable, "-m", "leaseguard", "check", "--dsn", busy.dsn, *FACTS]
    done = subprocess.run(
        [*check, "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 75, done.stdout + done.stderr


def test_idle_polls_produce_no_info_lines(busy):
    done = run_drain(busy, "--poll-s", "0.05", "--deadline-s", "1.5")
    assert done.returncode == 75
    lines = done.stderr.strip().splitlines()
    # start, end and counters only, although ~30 polls ran
    assert len(lines) == 3, lines
    assert "idle_polls=" in lines[-1]
    idle = int(lines[-1].split("idle_polls=")[1].split()[0])
    assert idle >= 5


def test_an_empty_table_drains_immediately(db):
    with db.connect() as conn:
        create_runs_table(conn)
    assert run_drain(db).returncode == 0


def test_pg_cron_jobs_are_paused_during_the_drain_and_active_afterwards(busy, claim_job):
    seen = []
    watcher = threading.Thread(
        target=lambda: seen.append(wait_until(lambda: job_active(busy, claim_job) == "f"))
    )
    watcher.start()
    done = drain_ending_the_claim(
        busy, "--poll-s", "0.2", "--pause-cron-job", claim_job, "--cron-database", "postgres"
    )
    watcher.join()
    assert done.returncode == 0, done.stderr
    assert seen == [True]
    assert job_active(busy, claim_job) == "t"
    assert f"intake paused pg_cron job={claim_job}" in done.stderr
    assert f"intake resumed pg_cron job={claim_job}" in done.stderr


def test_an_unknown_cron_job_fails_closed_and_pauses_nothing(busy, claim_job):
    done = run_drain(
        busy, "--pause-cron-job", claim_job, "no_such_job", "--cron-database", "postgres"
    )
    assert done.returncode == 1
    assert "pg_cron job(s) not found: no_such_job" in done.stderr
    assert "error=DatabaseError" in done.stdout, done.stdout  # a public kind, not a private class
    assert job_active(busy, claim_job) == "t"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_drain_still_resumes_the_jobs(busy, claim_job, signum):
    proc = subprocess.Popen(
        drain_argv(
            busy, "--poll-s", "0.2", "--pause-cron-job", claim_job, "--cron-database", "postgres"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert wait_until(lambda: job_active(busy, claim_job) == "f")
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "drain interrupted; intake was resumed" in stderr
    assert job_active(busy, claim_job) == "t"


def test_a_pause_command_runs_before_waiting_and_its_resume_after(busy, tmp_path):
    marker = tmp_path / "intake-paused"
    seen = []
    watcher = threading.Thread(target=lambda: seen.append(wait_until(marker.exists)))
    watcher.start()
    done = drain_ending_the_claim(
        busy,
        "--poll-s",
        "0.2",
        "--pause-command",
        f"touch {marker}",
        "--resume-command",
        f"rm {marker}",
    )
    watcher.join()
    assert done.returncode == 0, done.stderr
    assert seen == [True]
    assert not marker.exists()


def test_the_resume_command_also_runs_when_the_deadline_passes(busy, tmp_path):
    marker = tmp_path / "intake-paused"
    done = run_drain(
        busy,
        "--poll-s",
        "0.2",
        "--deadline-s",
        "0.5",
        "--pause-command",
        f"touch {marker}",
        "--resume-command",
        f"rm {marker}",
    )
    assert done.returncode == 75
    assert not marker.exists()


def test_a_pause_command_that_fails_half_way_still_gets_its_resume(busy, tmp_path):
    """`stop worker-a && stop worker-b` with b failing: a is stopped. The drain fails (nothing
    judged), and the resume command runs all the same: a pause that started is given back."""
    marker = tmp_path / "intake-paused"
    done = run_drain(
        busy,
        "--poll-s",
        "0.2",
        "--pause-command",
        f"touch {marker} && exit 3",
        "--resume-command",
        f"rm {marker}",
    )
    assert done.returncode == 1, done.stderr
    assert "intake pause command exited 3" in done.stderr
    assert not marker.exists(), "the half-done pause was never given back"


CHECK_KEYS = {
    "decision": str,
    "lease_s": float,
    "task_timeout_s": float,
    "task_timeout_source": str,
    "runtime_started_at": str,
    "checked_at": str,
    "counts": dict,
    "live": list,
    "wait_upper_bound_s": float,
}


@pytest.mark.parametrize("busy_or_not", ["deferred", "drained"])
def test_drain_json_carries_the_check_objects_keys_at_the_top(busy, busy_or_not):
    """`drain --json` prints the object `check --json` does (its drain keys beside it)."""
    if busy_or_not == "drained":
        with busy.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
    done = run_drain(busy, "--poll-s", "0.2", "--deadline-s", "0.5", "--json")
    assert done.returncode == {"deferred": 75, "drained": 0}[busy_or_not], done.stderr
    result = json.loads(done.stdout)
    for key, kind in CHECK_KEYS.items():
        assert isinstance(result[key], kind), key
    assert result["decision"] == {"deferred": "defer", "drained": "proceed"}[busy_or_not]
    live = busy_or_not == "deferred"
    assert result["counts"] == {"live": int(live), "stale": 0, "orphaned": 0, "queued": 1}
    assert [claim["id"] for claim in result["live"]] == (["1"] if live else [])
    for claim in result["live"]:
        assert isinstance(claim["remaining_s"], float)
        assert {"claimed_at", "lease_expires_at"} <= claim.keys()
    assert (result["lease_s"], result["task_timeout_s"]) == (7200.0, 3600.0)
    assert result["drained"] is not live  # the drain's own keys stay
