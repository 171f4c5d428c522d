"""deploy.yml with several hosts per batch (serial > 1): the batch is judged by ONE task, each
host by its own facts, one database connection for them all; every host then restarts.

Real ansible-playbook on local-connection hosts, each with its own worker process (its task
timeout in its environment, its start time the process's), restarted by a command.
"""

import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from leaseguard.adapters.pauses import hold_jobs
from leaseguard.core.lookups import parse_process_start
from sandbox.runs_table import create_runs_table
from tests.support.ansible_run import (
    REPO,
    db_vars,
    run_playbook,
    write_each_host_play,
    write_inventory,
)
from tests.support.busy_intake import active, cron_conn, intake_job
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JUDGE = "Judge the claims by the system's own lease"
RESTART = "Restart the runtime and check that its start time moved forward"
HOSTS = ("app1", "app2", "app3")
# The play's serial is read from the play's own variables (extra vars), not the inventory.
SERIAL = {"leaseguard_deploy_serial": len(HOSTS)}
WORKER = "APP_TASK_TIMEOUT_S=3600 setsid sleep 600 >/dev/null 2>&1 & echo $! > {pid}"


@pytest.fixture
def batch(db, tmp_path):
    with db.connect() as conn:
        create_runs_table(conn)
    hosts = {}
    for host in HOSTS:
        pid = tmp_path / f"{host}.pid"
        subprocess.run(["sh", "-c", WORKER.format(pid=pid)], check=True)
        source = {"source": "process", "pid_file": str(pid)}
        hosts[host] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": "/usr/bin/python3",
            "leaseguard_task_timeout": source,
            "leaseguard_runtime": source,
            "leaseguard_restart_method": "command",
            "leaseguard_restart_command": [
                "sh",
                "-c",
                f"kill $(cat {pid}); " + WORKER.format(pid=pid),
            ],
        }
    inventory = write_inventory(
        tmp_path / "inventory.yml", hosts, **db_vars(db), leaseguard_drain_poll_s=0.2
    )
    yield inventory
    for host in HOSTS:
        subprocess.run(["sh", "-c", f"kill $(cat {tmp_path / host}.pid)"], check=False)


def guard_backends(db):
    with db.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leaseguard'"
        ).fetchone()
    return row[0]


def deploy_beside(work, batch, tmp_path, *args, **extra_vars):
    """deploy.yml while `work(done)` runs beside it in a thread (`done` set once it ended)."""
    done = threading.Event()
    beside = threading.Thread(target=work, args=(done,))
    beside.start()
    try:
        return run_playbook(
            "leaseguard.deploy.deploy", batch, tmp_path, *args, extra_vars=extra_vars
        )
    finally:
        done.set()
        beside.join()


def test_a_batch_waits_as_one_judgment_over_one_connection_then_every_host_restarts(
    db, batch, tmp_path
):
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    seen = []

    def watch_then_finish(done):
        began = time.monotonic()
        while not done.wait(0.05):
            seen.append(guard_backends(db))
            if seen[-1] and time.monotonic() - began > 1:  # the drain is waiting
                with db.connect() as conn:
                    conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")

    run = deploy_beside(watch_then_finish, batch, tmp_path, leaseguard_on_busy="wait", **SERIAL)
    assert run.returncode == 0, run.stdout[-5000:]
    judged = {h: r for h, r in run.results(JUDGE).items() if not r.get("skipped")}
    assert list(judged) == ["app1"]  # one task for the whole batch
    verdicts = judged["app1"]["hosts"]
    assert sorted(verdicts) == list(HOSTS)
    for verdict in verdicts.values():
        assert verdict["decision"] == "proceed"
        assert verdict["drain"]["counters"]["leases_ended"] == 1  # each host waited for it
    assert max(seen) == 1, seen  # one connection for the batch, not one per fork
    restarted = run.results(RESTART)
    assert sorted(restarted) == list(HOSTS)
    assert all(r["changed"] for r in restarted.values())


def started(pid_file):
    pid = pid_file.read_text().strip()
    script = f"getconf CLK_TCK; grep '^btime ' /proc/stat; cat /proc/{pid}/stat"
    return parse_process_start(subprocess.check_output(["sh", "-c", script], text=True), "pid")


def test_a_batch_defers_each_host_by_its_own_facts(db, batch, tmp_path):
    """A claim made before app2's worker started but after the others': live on app1 and
    app3 (defer), an orphan on app2 (it restarts). A process's start is known to a second
    (/proc/stat's btime): the claim is taken over two seconds from either start."""
    pid = tmp_path / "app2.pid"
    apart = timedelta(seconds=2.5)
    assert wait_until(lambda: datetime.now(UTC) - started(tmp_path / "app1.pid") > apart)
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    claimed = datetime.now(UTC)
    assert wait_until(lambda: datetime.now(UTC) - claimed > apart)
    subprocess.run(["sh", "-c", f"kill $(cat {pid}); " + WORKER.format(pid=pid)], check=True)
    run = run_playbook(
        "leaseguard.deploy.deploy",
        batch,
        tmp_path,
        extra_vars={"leaseguard_clock_skew_s": 0, **SERIAL},
    )
    assert run.returncode == 2, run.stdout[-5000:]
    verdicts = run.result(JUDGE, "app1")["hosts"]
    decisions = {host: v["decision"] for host, v in verdicts.items()}
    assert decisions == {"app1": "defer", "app2": "proceed", "app3": "defer"}
    assert verdicts["app2"]["counts"]["orphaned"] == 1
    assert sorted(run.results(RESTART)) == ["app2"]


def test_each_host_fails_on_and_forces_every_hosts_defer_not_only_its_own(db, tmp_path):
    """The run_once host proceeds (the claim is an orphan there) while app2 defers: with
    fail_on_defer the task fails naming app2, with force it warns about app2's claim."""
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) "
            "VALUES (7, 'running', now() - interval '10 minutes')"
        )
    since = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()  # after the claim
    runtimes = {"app1": {"source": "fixed", "started_at": since}, "app2": {"source": "none"}}
    hosts = {
        host: {"ansible_connection": "local", "leaseguard_runtime": runtime}
        for host, runtime in runtimes.items()
    }
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        hosts,
        **db_vars(db),
        leaseguard_task_timeout={"source": "fixed", "value_s": 3600},
    )
    play = write_each_host_play(
        tmp_path / "each.yml",
        {"name": "Forced", "force": True},
        {"name": "Failed on defer", "fail_on_defer": True},
    )
    run = run_playbook(play, inventory, tmp_path)
    assert run.returncode == 2, run.stdout[-5000:]
    forced = run.result("Forced", "app1")
    assert forced["decision"] == "proceed" and not forced.get("failed")
    assert forced["hosts"]["app2"]["forced"] is True and forced["forced"] is True
    assert "FORCED on app2: 1 live claim(s) will be killed: 7" in run.stdout + run.stderr
    failed = run.result("Failed on defer", "app1")
    assert failed["failed"] is True
    assert failed["msg"].endswith("; deferring: app2"), failed["msg"]
    assert failed["hosts"]["app1"]["decision"] == "proceed"


def test_a_host_deferring_in_a_batch_stops_the_rollout_before_the_next_batch(db, batch, tmp_path):
    """serial 2 over three hosts: app1 (first batch) defers on a live claim, so app3 (second
    batch) is not restarted, though app1 failed inside the block whose `always` gave its
    intake back (a failure max_fail_percentage does not count). The claim, ten minutes old,
    is live on app1 (its runtime started two hours ago) and an orphan on app2 and app3."""
    log = tmp_path / "intake.log"
    inventory = yaml.safe_load(batch.read_text())
    inventory["app"]["hosts"]["app1"].update(
        leaseguard_runtime={
            "source": "fixed",
            "started_at": (datetime.now(UTC) - timedelta(hours=2)).isoformat(),
        },
        leaseguard_pause_command=["sh", "-c", f"echo paused >> {log}"],
        leaseguard_resume_command=["sh", "-c", f"echo resumed >> {log}"],
    )
    batch.write_text(yaml.safe_dump(inventory))
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at)"
            " VALUES (1, 'running', now() - interval '10 minutes')"
        )
    run = run_playbook(
        "leaseguard.deploy.deploy", batch, tmp_path, extra_vars={"leaseguard_deploy_serial": 2}
    )
    assert run.returncode == 2, run.stdout[-5000:]
    refusal = run.result("Defer the restart while work is in flight", "app1")
    assert "not restarting app1: 1 live claim(s) in execution_runs (1)" in refusal["msg"]
    assert log.read_text().split() == ["paused", "resumed"]  # app1's intake given back
    assert sorted(run.results(RESTART)) == ["app2"]  # the second batch (app3) did not restart
    assert run.stats["app1"]["failures"] == 1


@pytest.mark.parametrize("playbook", ["deploy.yml", "drain.yml"])
def test_the_playbooks_run_linear_whatever_ansible_strategy_says(playbook):
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text())
    assert all(play.get("strategy") == "linear" for play in plays)


def test_free_strategy_from_the_environment_still_migrates_once_for_the_fleet(db, batch, tmp_path):
    """ANSIBLE_STRATEGY=free ignores run_once: every host held, judged and migrated on its
    own. The playbook's plays are linear, so the migration runs once, then every host restarts."""
    log = tmp_path / "migrated.log"
    run = run_playbook(
        "leaseguard.deploy.deploy",
        batch,
        tmp_path,
        extra_vars={"leaseguard_migrate_command": ["sh", "-c", f"echo migrated >> {log}"]},
        env={"ANSIBLE_STRATEGY": "free"},
    )
    assert run.returncode == 0, run.stdout[-5000:]
    assert log.read_text().split() == ["migrated"], run.stdout[-5000:]
    assert sorted(run.results(RESTART)) == list(HOSTS)


def test_a_caller_ignoring_errors_restarts_no_host_whose_verdict_deferred(db, batch, tmp_path):
    """A play of the caller's own with `ignore_errors: true` on the role: each host's defer is
    ignored (the play goes on), but the host is not restarted onto its live claim. Forced, or
    once the claim is done, the same play restarts every host."""


@pytest.mark.parametrize("on_busy", ["defer", "wait"])
def test_the_restarts_own_hold_is_no_leftover_in_its_verdict(db, batch, tmp_path, on_busy):
    """The restart role holds the pg_cron intake (intake_hold), then judges: its own hold is
    the one taken a moment ago, not one "not given back yet" to give back by hand (which,
    run mid-restart, would resume intake under the restart). Another run's hold still is."""
    with intake_job(db, with_table=False) as job, cron_conn(db) as conn:
        hold_jobs(conn, [job], "fab drain pid 42 on elsewhere", "restart app9")
        run = run_playbook(
            "leaseguard.deploy.deploy",
            batch,
            tmp_path,
            "--limit",
            "app1",
            extra_vars={
                "leaseguard_on_busy": on_busy,
                "leaseguard_pause_cron_jobs": [job],
                "leaseguard_cron_database": "postgres",
            },
        )
        assert run.returncode == 0, run.stdout[-5000:]
        verdict = run.result(JUDGE, "app1")
        assert verdict["intake"]["held"] is True
        leftovers = [w for w in verdict["warnings"] if "is still paused" in w]
        assert len(leftovers) == 1, leftovers
        assert "by fab drain pid 42 on elsewhere" in leftovers[0]


def test_a_held_job_switched_back_on_during_the_wait_fails_before_the_restart(db, batch, tmp_path):
    """leaseguard_on_busy=wait: while the restart role's guard drains, something switches the
    held pg_cron job back on. The proceed that follows is not judged with intake held: the
    guard fails it and the host is not restarted (its hold given back all the same)."""
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    play = tmp_path / "play.yml"
    role = {"role": "leaseguard.deploy.restart", "ignore_errors": True}
    play.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "roles": [role]}]))
    pids = {host: (tmp_path / f"{host}.pid").read_text() for host in HOSTS}
    run = run_playbook(play, batch, tmp_path)
    assert run.returncode == 0, run.stdout[-5000:]
    deferred = run.results("Defer the restart while work is in flight")
    assert all(result.get("failed") for result in deferred.values()), deferred
    assert all(result.get("skipped") for result in run.results(RESTART).values())
    assert {host: (tmp_path / f"{host}.pid").read_text() for host in HOSTS} == pids
    # Forced, the same defer restarts every host (the claim named); done, nothing to force.
    for extra in ({"leaseguard_on_busy": "force"}, {}):
        run = run_playbook(play, batch, tmp_path, extra_vars=extra)
        assert run.returncode == 0, run.stdout[-5000:]
        assert all(result["changed"] for result in run.results(RESTART).values())
        assert all((tmp_path / f"{host}.pid").read_text() != pids[host] for host in HOSTS)
        pids = {host: (tmp_path / f"{host}.pid").read_text() for host in HOSTS}
        with db.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")


def test_a_run_started_past_the_hold_restarts_no_host(db, batch, tmp_path):
    """--start-at-task at the guard skips the first host's intake hold (and the verdict then
    said "no intake configured"): that host is not restarted, it fails naming why, and the
    rollout stops. The whole role, as usual, holds each host's intake and restarts them all."""
    log = tmp_path / "intake.log"
    inventory = yaml.safe_load(batch.read_text())
    inventory["app"]["vars"].update(
        leaseguard_pause_command=["sh", "-c", f"echo paused >> {log}"],
        leaseguard_resume_command=["sh", "-c", f"echo resumed >> {log}"],
    )
    batch.write_text(yaml.safe_dump(inventory))
    pids = {host: (tmp_path / f"{host}.pid").read_text() for host in HOSTS}
    run = run_playbook(
        "leaseguard.deploy.deploy",
        batch,
        tmp_path,
        "--start-at-task",
        "Judge the claims by the system's own lease",
    )
    assert run.returncode == 2, run.stdout[-5000:]
    refusal = run.result(RESTART, "app1")
    assert refusal["failed"] is True
    assert "not restarting app1: this run did not hold its intake" in refusal["msg"]
    assert {host: (tmp_path / f"{host}.pid").read_text() for host in HOSTS} == pids
    assert not log.exists()
    run = run_playbook("leaseguard.deploy.deploy", batch, tmp_path)
    assert run.returncode == 0, run.stdout[-5000:]
    assert all((tmp_path / f"{host}.pid").read_text() != pids[host] for host in HOSTS)
    assert log.read_text().split() == ["paused", "resumed"] * len(HOSTS)

    with intake_job(db, with_table=False) as job:

        def switch_on_then_finish(_done):
            if wait_until(lambda: not active(db, job) and guard_backends(db), 120):
                with cron_conn(db) as conn:
                    conn.execute(
                        "SELECT cron.alter_job(jobid, active := true) FROM cron.job "
                        "WHERE jobname = %s",
                        (job,),
                    )
            with db.connect() as conn:
                conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")

        run = deploy_beside(
            switch_on_then_finish,
            batch,
            tmp_path,
            "--limit",
            "app1",
            leaseguard_on_busy="wait",
            leaseguard_pause_cron_jobs=[job],
            leaseguard_cron_database="postgres",
        )
        assert run.returncode == 2, run.stdout[-5000:]
        judged = run.result(JUDGE, "app1")
        assert judged["failed"] is True
        assert f"intake no longer held: pg_cron job(s) {job} active again" in judged["msg"]
        assert "app1" not in run.results(RESTART)
        assert active(db, job)


@pytest.mark.parametrize("cut_off", ["now", "2026-12-06T07:00:00Z"])
def test_a_cut_off_that_is_no_epoch_fails_before_anything_not_skipping_every_host(
    db, batch, tmp_path, cut_off
):
    """Jinja's float reads a cut-off that is no number as 0, after which every runtime started:
    every host was skipped as "restarted already" and the deploy passed, restarting nothing."""
    extra = {"leaseguard_restart_if_started_before": cut_off, **SERIAL}
    run = run_playbook("leaseguard.deploy.deploy", batch, tmp_path, extra_vars=extra)
    assert run.returncode == 2, run.stdout[-5000:]
    refused = run.result("Check the leaseguard variables", "app1")
    assert "leaseguard_restart_if_started_before must be epoch seconds" in refused["msg"]
    assert not run.results(RESTART)


def test_an_epoch_cut_off_after_every_start_restarts_every_host(db, batch, tmp_path):
    later = f"{datetime.now(UTC).timestamp() + 3600:.3f}"
    extra = {"leaseguard_restart_if_started_before": later, **SERIAL}
    run = run_playbook("leaseguard.deploy.deploy", batch, tmp_path, extra_vars=extra)
    assert run.returncode == 0, run.stdout[-5000:]
    assert sorted(run.results(RESTART)) == list(HOSTS)


@pytest.mark.parametrize("variable", ["leaseguard_restart_command", "leaseguard_resume_command"])
def test_a_command_given_as_one_string_fails_before_intake_is_held(db, batch, tmp_path, variable):
    """Ansible's list type takes a string as one argv element: `sh -c ...` as a program's
    name, which failed only when run, after intake was held and the claims judged (a resume
    command: intake never given back)."""
    log = tmp_path / "intake.log"
    commands = {
        "leaseguard_pause_command": ["sh", "-c", f"echo paused >> {log}"],
        "leaseguard_resume_command": ["sh", "-c", f"echo resumed >> {log}"],
    }
    commands[variable] = f"sh -c 'echo {variable} >> {log}'"
    run = run_playbook("leaseguard.deploy.deploy", batch, tmp_path, extra_vars=commands)
    assert run.returncode == 2, run.stdout[-5000:]
    refused = run.result("Check the leaseguard variables", "app1")
    assert f"{variable} (wants list of str (an argv, not one string))" in refused["msg"]
    assert not log.exists()  # intake never held, nothing restarted
    assert not run.results(RESTART)


DEFER = "Defer the restart while work is in flight"


@pytest.mark.parametrize(
    ("expiry", "on_busy", "check", "defers"),
    [
        ("infinity", "defer", False, True),
        ("infinity", "wait", True, True),
        ("2100-01-01 00:00:00+00", "wait", True, False),
    ],
    ids=["never-defer", "never-wait-check", "bounded-wait-check"],
)
def test_a_lease_that_never_ends_is_said_so_and_a_dry_run_wait_defers_as_the_real_one(
    db, batch, tmp_path, expiry, on_busy, check, defers
):
    """A live claim whose lease never ends (expiry 'infinity'): the defer said "the longest
    lease ends within 0 s", and --check with wait said "would wait up to 0.0 s ... then
    restart" though the real drain's deadline (0) defers at once. A bounded lease still
    reports the wait in a dry run."""
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at, lease_expires_at)"
            " VALUES (1, 'running', now(), %s)",
            (expiry,),
        )
    run = run_playbook(
        "leaseguard.deploy.deploy",
        batch,
        tmp_path,
        *(["--check"] if check else []),
        extra_vars={
            "leaseguard_lease": {"expires_at_column": "lease_expires_at"},
            "leaseguard_on_busy": on_busy,
        },
    )
    deferred = run.results(DEFER).get("app1", {})
    if defers:
        assert run.returncode == 2, run.stdout[-5000:]
        assert "a live lease never ends or its end is unknown" in deferred["msg"]
        assert "within 0 s" not in deferred["msg"]
    else:
        assert run.returncode == 0, run.stdout[-5000:]
        assert deferred.get("skipped") is True
        assert "would wait up to" in run.result("Report what the restart would do", "app1")["msg"]
    assert all(result.get("skipped") for result in run.results(RESTART).values())
