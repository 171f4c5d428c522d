"""Network faults during `fab drain` / `fab guard` through the SSH tunnel, injected for real.

Each case starts its own host (a network namespace with sshd and a PostgreSQL on the host's
own loopback, reached only through the tunnel), waits for a deterministic point (a row
state, a backend in pg_stat_activity, a log line), injects one fault and asserts the exit
status, the message naming the cause and the state of intake (the pg_cron job).

Budgets are short so every case takes seconds: connect 2 s, statements 1 s, so one poll is
bounded by 2 + 1 + 2 (margin) = 5 s.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.support.process_lines import Lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
JOB = "claim_intake"
CONNECT_S = 2
STATEMENT_MS = 1000
POLL_BUDGET_S = CONNECT_S + STATEMENT_MS / 1000 + 2  # session.POLL_MARGIN_S
STARTUP_S = 5.0  # starting `fab` (Python imports, SSH handshake) on a loaded machine
RESUME_RETRY_S = 2  # --resume-retry-s: how long a drain keeps trying to give intake back


def wait_for(
    condition: Callable[[], object], timeout: float = 30.0, what: str = "", fab: Fab | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline or (fab is not None and fab.proc.poll() is not None):
            output = fab.stderr if fab is not None else ""
            pytest.fail(f"timed out waiting for {what or condition}\n{output}")
        time.sleep(0.02)


class Fab:
    """`fab` running in the background, both pipes collected line by line as they come.

    Each pipe has its own reader: `communicate()` would also read stderr and take lines
    away from a reader the test is watching.
    """

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        self._out = Lines(self.proc.stdout)
        self._err = Lines(self.proc.stderr)
        self.stdout = ""

    @property
    def stderr(self) -> str:
        return "".join(self._err.lines)

    def wait(self, timeout: float) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"fab did not end within {timeout:.0f}s:\n{self.stderr}")
        self.stdout = self._out.text()
        self._err.text()  # wait until the reader has every line
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def db_host(app_host_factory):
    """A host of its own (its PostgreSQL is restarted or cut off), with a claim and a job."""
    host = app_host_factory("fault1", engine=None, pg=True)
    with host.pg.connect(socket=True) as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
        conn.execute("SELECT cron.schedule(%s, '0 0 1 1 *', 'SELECT 1')", (JOB,))
    return host


@pytest.fixture
def start_fab(db_host, tmp_path) -> Iterator[Callable[..., Fab]]:
    started: list[Fab] = []
    config = tmp_path / "fabric.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "leaseguard": {
                    "connection": {
                        "dsn": "dbname=postgres user=postgres",
                        "known_hosts": str(db_host.known_hosts_path),
                    },
                    "task_timeout": {"source": "fixed", "value_s": 3600},
                    "runtime": {"source": "none"},
                    "connect_timeout_s": CONNECT_S,
                    "statement_timeout_ms": STATEMENT_MS,
                    "drain": {"cron_database": "postgres"},
                }
            }
        )
    )

    def start(*args: str) -> Fab:
        fab = Fab(
            [
                sys.executable,
                "-m",
                "fabric",
                "-f",
                str(config),
                "-i",
                str(db_host.client_key_path),
                "-H",
                f"root@{db_host.addr}",
                *args,
            ]
        )
        started.append(fab)
        return fab

    yield start
    for fab in started:
        fab.kill()


def job_active(host) -> bool:
    with host.pg.connect(socket=True) as conn:
        row = conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (JOB,)).fetchone()
    return bool(row[0])


def guard_backends(host, *, waiting_on_lock: bool = False) -> list[int]:
    """PIDs of the guard's own backends (application_name=leaseguard)."""
    query = "SELECT pid FROM pg_stat_activity WHERE application_name = 'leaseguard'"
    if waiting_on_lock:
        query += " AND wait_event_type = 'Lock'"
    with host.pg.connect(socket=True) as conn:
        return [row[0] for row in conn.execute(query).fetchall()]


def finish_claims(host) -> None:
    with host.pg.connect(socket=True) as conn:
        conn.execute("UPDATE execution_runs SET status = 'done'")


@contextlib.contextmanager
def partitioned(host) -> Iterator[None]:
    """Drop every packet on the host's link, inside its namespace only; always undone.

    Only the veth end in the namespace is filtered: the host's own loopback (sshd to its
    PostgreSQL) and the machine's own tables are left alone.
    """
    iface = host.netns.veth_ns
    rules = [["INPUT", "-i", iface, "-j", "DROP"], ["OUTPUT", "-o", iface, "-j", "DROP"]]
    added = []
    try:
        for rule in rules:
            host.run(["iptables", "-w", "-A", *rule])
            added.append(rule)
        yield
    finally:
        for rule in added:
            host.run(["iptables", "-w", "-D", *rule], check=False)


def drain_is_polling(host, fab: Fab) -> Callable[[], bool]:
    """Intake paused and the first poll done (its `start` line logged): faults come after."""
    return lambda: (
        "start live=1" in fab.stderr and not job_active(host) and bool(guard_backends(host))
    )


# --- PostgreSQL restart and backend termination -------------------------------------------


def test_a_postgresql_restart_mid_drain_is_survived_and_intake_resumed(db_host, start_fab):
    fab = start_fab("drain", "--poll-s", "1", "--pause-cron-job", JOB)
    wait_for(drain_is_polling(db_host, fab), what="the drain to pause intake and poll", fab=fab)
    # -l: the restarted server must not inherit pg_ctl's captured stdout.
    db_host.pg._pg_ctl("restart", "-m", "fast", "-l", str(db_host.pg.logfile), check=True)
    wait_for(lambda: guard_backends(db_host), what="the drain to reach the restarted server")
    finish_claims(db_host)
    status = fab.wait(timeout=30)
    assert status == 0, fab.stdout + fab.stderr
    assert "decision=proceed" in fab.stdout
    assert "leases_ended=1" in fab.stderr
    assert "intake resumed pg_cron job=" + JOB in fab.stderr
    assert job_active(db_host)


def test_the_guards_backend_terminated_mid_drain_is_replaced(db_host, start_fab):
    fab = start_fab("drain", "--poll-s", "0.5", "--pause-cron-job", JOB)
    wait_for(drain_is_polling(db_host, fab), what="the drain to pause intake and poll", fab=fab)
    [first] = guard_backends(db_host)
    with db_host.pg.connect(socket=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone()[0]
    wait_for(lambda: guard_backends(db_host) not in ([], [first]), what="a new guard connection")
    finish_claims(db_host)
    status = fab.wait(timeout=30)
    assert status == 0, fab.stdout + fab.stderr
    assert "leases_ended=1" in fab.stderr
    assert job_active(db_host)


# --- partitions -----------------------------------------------------------------------------


def test_a_partition_during_a_drain_ends_it_within_its_bound_naming_the_ssh_host(
    db_host, start_fab
):
    """The link stays down: the drain cannot resume intake, and says so, within its bound."""
    deadline_s = 3
    fab = start_fab(
        "drain",
        "--poll-s",
        "0.5",
        "--deadline-s",
        str(deadline_s),
        "--resume-retry-s",
        str(RESUME_RETRY_S),
        "--pause-cron-job",
        JOB,
    )
    wait_for(drain_is_polling(db_host, fab), what="the drain to pause intake and poll", fab=fab)
    with partitioned(db_host):
        cut = time.monotonic()
        # The deadline, one poll in flight, the resume's retry window plus its last attempt
        # (an SSH connect), and the rest.
        bound = deadline_s + POLL_BUDGET_S + RESUME_RETRY_S + CONNECT_S + STARTUP_S
        status = fab.wait(timeout=bound + 30)
        took = time.monotonic() - cut
    print(f"partitioned drain ended {took:.1f}s after the cut (bound {bound:.1f}s)")
    assert status == 1, fab.stdout + fab.stderr
    assert took < bound, f"the drain took {took:.1f}s, bound {bound:.1f}s"
    assert f"host {db_host.addr}" in fab.stdout
    assert "SSH" in fab.stdout
    assert f"INTAKE STILL PAUSED: cannot resume pg_cron job(s) {JOB}" in fab.stdout
    assert "resume" in fab.stdout.rsplit("give it back with", 1)[1]
    assert "could not connect to 127.0.0.1:5432" not in fab.stdout + fab.stderr
    assert not job_active(db_host)  # what this drain could not do over a dead link
    with db_host.pg.connect(socket=True) as conn:
        conn.execute("SELECT cron.alter_job(jobid, active := true) FROM cron.job")


def test_a_partition_lifted_mid_drain_is_reconnected_and_intake_resumed(db_host, start_fab):
    fab = start_fab("drain", "--poll-s", "0.5", "--deadline-s", "20", "--pause-cron-job", JOB)
    wait_for(drain_is_polling(db_host, fab), what="the drain to pause intake and poll", fab=fab)
    with partitioned(db_host):
        wait_for(
            lambda: "drain poll failed" in fab.stderr,
            timeout=POLL_BUDGET_S + STARTUP_S,
            what="a poll to fail on the dead link",
        )
    assert "SSH" in fab.stderr.split("drain poll failed", 1)[1]
    wait_for(lambda: "SSH connection reopened" in fab.stderr, what="the tunnel to reconnect")
    # The backend the partition left open (the host's sshd still holds its channel) is
    # ended by the reconnect that replaced it: one leaseguard backend, not two.
    wait_for(
        lambda: len(guard_backends(db_host)) == 1,
        timeout=10,
        what="the left-behind backend to be ended",
        fab=fab,
    )
    finish_claims(db_host)
    status = fab.wait(timeout=30)
    assert status == 0, fab.stdout + fab.stderr
    assert job_active(db_host)


def test_a_partition_during_fab_guard_fails_closed_within_its_bound(db_host, start_fab):
    with db_host.pg.connect(socket=True) as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE execution_runs IN ACCESS EXCLUSIVE MODE")
        fab = start_fab("guard")
        wait_for(
            lambda: guard_backends(db_host, waiting_on_lock=True),
            what="the guard query to wait on the lock",
        )
        with partitioned(db_host):
            cut = time.monotonic()
            locker.execute("ROLLBACK")
            status = fab.wait(timeout=POLL_BUDGET_S + 30)
            took = time.monotonic() - cut
    print(f"partitioned guard ended {took:.1f}s after the cut (bound {POLL_BUDGET_S:.1f}s)")
    assert status == 1, fab.stdout + fab.stderr
    assert took < POLL_BUDGET_S, f"fab guard took {took:.1f}s after the partition"
    assert "decision=failed error=TunnelError" in fab.stdout
    assert f"host {db_host.addr}" in fab.stdout


def test_fab_guard_over_a_link_dead_from_the_start_fails_within_the_connect_timeout(
    db_host, start_fab
):
    with partitioned(db_host):
        started = time.monotonic()
        fab = start_fab("guard")
        status = fab.wait(timeout=60)
        took = time.monotonic() - started
    print(f"guard over a dead link took {took:.1f}s including fab's start")
    assert status == 1, fab.stdout + fab.stderr
    assert took < CONNECT_S + STARTUP_S, f"fab guard took {took:.1f}s"
    assert "decision=failed error=TunnelError" in fab.stdout
    assert "cannot connect over SSH" in fab.stdout


def test_drain_yml_reopens_its_tunnel_after_a_partition_and_gives_intake_back(db_host, tmp_path):
    """Before: polls and the resume retried a dead tunnel port until intake stayed paused."""
    from sandbox.ansible_env import ansible_env
    from tests.support.ansible_run import write_inventory

    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"fault1": db_host.ansible_host_vars()},
        leaseguard_db_name="postgres",
        leaseguard_db_user="postgres",
        leaseguard_task_timeout={"source": "fixed", "value_s": 3600},
        leaseguard_runtime={"source": "none"},
        leaseguard_connect_timeout_s=CONNECT_S,
        leaseguard_statement_timeout_ms=STATEMENT_MS,
        leaseguard_pause_cron_jobs=[JOB],
        leaseguard_cron_database="postgres",
        leaseguard_drain_poll_s=0.5,
    )
    proc = subprocess.Popen(
        ["ansible-playbook", "-i", str(inventory), "leaseguard.deploy.drain"],
        cwd=REPO,
        env={**ansible_env(tmp_path), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = Lines(proc.stdout)
    try:
        assert out.wait_for(" start live=1 ", timeout_s=90), "".join(out.lines)[-3000:]
        assert not job_active(db_host)
        with partitioned(db_host):
            failed = out.wait_for("drain poll failed", timeout_s=POLL_BUDGET_S + 30)
            assert failed, "".join(out.lines)[-3000:]
        finish_claims(db_host)
        try:
            status = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("drain.yml did not end:\n" + "".join(out.lines)[-4000:])
        assert status == 0, out.text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert job_active(db_host)
