"""Intake held from before the verdict until the action is done, counted per holder.

Real PostgreSQL + pg_cron, real `leaseguard drain` processes. The busy intake is a claim
loop that claims a queued row every 0.1 s while its pg_cron job is active (as pg_cron starts
runs only of active jobs), each claim finished 0.3 s later: the incident's busy intake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest

from leaseguard.adapters.pauses import (
    hold_jobs,
    leftover_warnings,
    release_hold,
    resume_recorded,
    wait_quiet,
)
from leaseguard.core.errors import DatabaseError
from leaseguard.orchestration.intake import IntakeAccess, resume_pauses
from sandbox.subprocess_env import clean_env
from tests.support.busy_intake import BusyIntake, active, claims_between, cron_conn, intake_job
from tests.support.process_lines import Lines
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

FACTS = ["--task-timeout-s", "3600", "--runtime-started-at", "2000-01-01T00:00:00Z"]


@pytest.fixture
def intake(db):
    with intake_job(db) as job:
        yield job


# A command that records the database clock when it starts and ends, and the verdict it got;
# given a go file, it runs until the test creates it (see run_until_go).
TIMED_COMMAND = """
import json, os, sys, time, psycopg
with psycopg.connect(sys.argv[1]) as conn:
    start = conn.execute("select clock_timestamp()").fetchone()[0].isoformat()
    if len(sys.argv) > 4:
        open(sys.argv[2] + ".started", "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline:
            time.sleep(0.02)
    end = conn.execute("select clock_timestamp()").fetchone()[0].isoformat()
verdict = json.load(open(os.environ["LEASEGUARD_VERDICT_FILE"]))
json.dump({"start": start, "end": end, "verdict": verdict}, open(sys.argv[2], "w"))
sys.exit(int(sys.argv[3]))
"""


def drain_argv(db, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "leaseguard",
        "drain",
        "--dsn",
        db.dsn,
        *FACTS,
        "--poll-s",
        "0.2",
        "--cron-database",
        "postgres",
        *extra,
    ]


def timed_command(db, out, status: int = 0, go=None) -> list[str]:
    argv = ["--", sys.executable, "-c", TIMED_COMMAND, db.dsn, str(out), str(status)]
    return argv if go is None else [*argv, str(go)]


def run(argv: list[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=clean_env(), timeout=timeout, check=False
    )


@contextmanager
def started(argv: list[str]) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    """A drain in the background, its stderr read line by line; killed if still running."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        yield proc, Lines(proc.stderr)
    finally:
        if proc.poll() is None:
            proc.kill()


def run_until_go(argv, out, go, ready) -> subprocess.CompletedProcess[str]:
    """Run a drain whose timed command runs until `ready(count at start)` holds, then go."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
    )
    try:
        started = out.with_name(out.name + ".started")
        wait_until(lambda: started.exists() or proc.poll() is not None, 60)
        if proc.poll() is None:  # else its exit status and stderr say what went wrong
            assert wait_until(ready(), 30), "the busy intake never had its chance"
            go.touch()
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


# --- the hold on a busy intake: both directions ---------------------------------------------


def test_no_claim_is_taken_between_the_verdict_and_the_end_of_the_command(db, intake, tmp_path):
    out = tmp_path / "ran.json"
    busy = BusyIntake(db, intake)
    busy.start()
    try:
        go = tmp_path / "go"
        argv = drain_argv(db, "--pause-cron-job", intake, *timed_command(db, out, go=go))

        def ten_looks_at_the_held_job():  # ten chances to claim, each taken were it not held
            looked = busy.looks
            return lambda: busy.looks >= looked + 10

        ran = run_until_go(argv, out, go, ten_looks_at_the_held_job)
        assert ran.returncode == 0, ran.stderr
        record = json.loads(out.read_text())
        verdict_at = datetime.fromisoformat(record["verdict"]["verdict"]["checked_at"])
        end = datetime.fromisoformat(record["end"])
        assert claims_between(db, verdict_at, end) == 0
        assert "intake: held (pg_cron:" in ran.stderr and "exited 0; intake: held" in ran.stderr
        # Given back after the command: the intake claims again.
        assert wait_until(lambda: active(db, intake), 10)
    finally:
        busy.stop()
    assert busy.claims > 0


def test_without_intake_the_busy_intake_claims_during_the_command_and_output_says_so(
    db, intake, tmp_path
):
    # The control: without a hold, a drain proceeds in a quiet moment and claims come in
    # while the command runs (so the test above can fail). A claim a second: there are quiet
    # moments (at 0.1 s claims are live at every poll, and an unheld drain never proceeds).
    out = tmp_path / "ran.json"
    busy = BusyIntake(db, intake, period_s=1.0)
    busy.start()
    try:
        go = tmp_path / "go"

        def a_claim_since_the_command_started():
            claimed = busy.claims
            return lambda: busy.claims > claimed

        argv = drain_argv(db, *timed_command(db, out, go=go))
        ran = run_until_go(argv, out, go, a_claim_since_the_command_started)
    finally:
        busy.stop()
    assert ran.returncode == 0, ran.stderr
    record = json.loads(out.read_text())
    verdict_at = datetime.fromisoformat(record["verdict"]["verdict"]["checked_at"])
    assert claims_between(db, verdict_at, datetime.fromisoformat(record["end"])) > 0
    assert "intake: not held" in ran.stderr


# --- hold and run: exit statuses -------------------------------------------------------------


def test_the_commands_exit_status_is_the_drains_and_intake_comes_back(db, intake, tmp_path):
    ran = run(drain_argv(db, "--pause-cron-job", intake, *timed_command(db, tmp_path / "o", 7)))
    assert ran.returncode == 7, ran.stderr
    assert "command " in ran.stderr and "exited 7" in ran.stderr
    assert active(db, intake)


def test_a_command_that_cannot_start_fails_and_gives_intake_back(db, intake):
    ran = run(drain_argv(db, "--pause-cron-job", intake, "--", "/nonexistent/deploy-step"))
    assert ran.returncode == 1
    assert "command /nonexistent/deploy-step could not start (FileNotFoundError)" in ran.stderr
    assert active(db, intake)


def test_live_work_at_the_deadline_never_runs_the_command(db, intake, tmp_path):
    with db.connect() as conn:
        conn.execute("INSERT INTO execution_runs VALUES (1, 'running', now(), now(), NULL)")
    out = tmp_path / "ran.json"
    argv = drain_argv(db, "--pause-cron-job", intake, "--deadline-s", "1", *timed_command(db, out))
    ran = run(argv)
    assert ran.returncode == 75, ran.stderr
    assert not out.exists()
    assert active(db, intake)


# --- counted holds -----------------------------------------------------------------------------


def test_intake_comes_back_only_when_the_last_holder_lets_go(db, intake):
    with cron_conn(db) as conn:
        first = hold_jobs(conn, [intake], "first pid 1 on here", "restart app1")
        second = hold_jobs(conn, [intake], "second pid 2 on here", "migration")
        assert (first.switched, second.switched) == ((intake,), ())
        assert second.jobs == (intake,)
        assert release_hold(conn, first) == ((), {intake: ("second pid 2 on here",)})
        assert not active(db, intake)
        assert release_hold(conn, second) == ((intake,), {})
    assert active(db, intake)


def test_an_operators_pause_is_neither_held_nor_given_back(db, intake):
    with cron_conn(db) as conn:
        conn.execute(
            "SELECT cron.alter_job(jobid, active := false) FROM cron.job WHERE jobname = %s",
            (intake,),
        )
        hold = hold_jobs(conn, [intake], "drain pid 1 on here")
        assert hold.jobs == () and hold.not_held == (intake,)
        release_hold(conn, hold)
    assert not active(db, intake)


def test_a_leftover_hold_names_its_holder_and_action_and_resume_gives_it_back(db, intake):
    with cron_conn(db) as conn:
        hold_jobs(conn, [intake], "fab drain pid 42 on ctl", "restart app1")
        hold_jobs(conn, [intake], "leaseguard drain pid 43 on ctl", "drain")
        warnings = [w for w in leftover_warnings(conn) if intake in w]
        assert len(warnings) == 2
        assert any(
            "still paused: paused at" in w and "by fab drain pid 42 on ctl" in w for w in warnings
        )
        assert any("(for: restart app1)" in w for w in warnings)
        outcome = resume_recorded(conn, [intake])
        assert len(outcome["records"]) == 2 and outcome["resumed"] == [intake]
        assert not outcome["kept"]
        assert [w for w in leftover_warnings(conn) if intake in w] == []
    assert active(db, intake)


def test_a_job_this_role_cannot_see_fails_the_hold_naming_the_role(db, intake):
    with cron_conn(db) as conn, pytest.raises(DatabaseError) as failed:
        hold_jobs(conn, [intake, "no_such_job"], "drain pid 1 on here")
    message = str(failed.value)
    assert "pg_cron job(s) not found: no_such_job (as role" in message
    assert "pg_cron shows each role only its own jobs" in message
    assert active(db, intake)  # nothing was paused


def test_two_real_drains_on_one_intake_give_it_back_only_after_both(db, intake, tmp_path):
    go = tmp_path / "go"  # the first drain's command runs until the second drain is done
    until_go = f"until [ -e {go} ]; do sleep 0.05; done"
    with started(drain_argv(db, "--pause-cron-job", intake, "--", "sh", "-c", until_go)) as (
        slow,
        lines,
    ):
        assert lines.wait_for("intake held: running command sh")
        quick = run(drain_argv(db, "--pause-cron-job", intake, "--", "true"))
        assert quick.returncode == 0, quick.stderr
        assert "intake still held pg_cron job=" in quick.stderr
        assert not active(db, intake)  # the first drain still holds it
        go.touch()
        assert slow.wait(timeout=60) == 0
    assert active(db, intake)


# --- runs already in progress ------------------------------------------------------------------


def test_the_hold_waits_for_a_run_already_in_progress(db, intake):
    """A pause stops new runs, not one already going: the verdict waits for it to end."""
    with cron_conn(db) as conn, cron_conn(db) as running:
        pid = running.execute("SELECT pg_backend_pid()").fetchone()[0]
        jobid = conn.execute("SELECT jobid FROM cron.job WHERE jobname = %s", (intake,)).fetchone()[
            0
        ]
        conn.execute(
            "INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, "
            "command, status, start_time) VALUES (%s, nextval('cron.runid_seq'), %s, %s, "
            "current_user, 'SELECT 1', 'running', now())",
            (jobid, pid, db.name),
        )
        hold = hold_jobs(conn, [intake], "drain pid 1 on here")
        ended = threading.Timer(1.5, running.close)
        ended.start()
        began = time.monotonic()
        wait_quiet(lambda: cron_conn(db), hold, timeout_s=20)
        assert time.monotonic() - began >= 1.4  # waited for the run's backend to end
        with pytest.raises(DatabaseError, match="intake is not quiet"):
            conn.execute(
                "UPDATE cron.job_run_details SET job_pid = pg_backend_pid() WHERE job_pid = %s",
                (pid,),
            )
            wait_quiet(lambda: cron_conn(db), hold, timeout_s=1.5)
        release_hold(conn, hold)


@pytest.mark.slow
def test_the_hold_waits_for_a_real_run_that_pausing_marked_canceled(db):
    """Real pg_cron: pausing a job whose run is in flight marks that run failed ('job
    canceled', no end time) and drops its connection, but the run's backend goes on running
    its statement (a claim, committed at its end). The hold waits for that backend."""
    job = f"sleepy_{db.name}"
    with cron_conn(db) as conn:
        conn.execute(
            "SELECT cron.schedule_in_database(%s, '* * * * *', 'SELECT pg_sleep(6)', %s)",
            (job, db.name),
        )
        jobid = conn.execute("SELECT jobid FROM cron.job WHERE jobname = %s", (job,)).fetchone()[0]
    try:
        with cron_conn(db) as conn:
            conn.autocommit = True

            def running():
                return conn.execute(
                    "SELECT job_pid FROM cron.job_run_details WHERE jobid = %s "
                    "AND status = 'running'",
                    (jobid,),
                ).fetchone()

            assert wait_until(running, 75), "pg_cron never started the job"  # the minute tick
            pid = running()[0]
            hold = hold_jobs(conn, [job], "drain pid 1 on here")
            wait_quiet(lambda: cron_conn(db), hold, timeout_s=30)
            still = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()[0]
            assert still == 0, "the hold judged intake quiet while the run's backend ran on"
            release_hold(conn, hold)
    finally:
        with cron_conn(db) as conn:
            conn.execute("SELECT cron.unschedule(%s)", (job,))


def test_a_signal_while_waiting_for_quiet_gives_intake_back_at_once(db, intake):
    """SIGTERM during the wait for a run already in progress: the drain does not sit out the
    quiet timeout (120 s) with intake paused; it ends, intake given back, no driver text."""
    with cron_conn(db) as conn, cron_conn(db) as running:
        pid = running.execute("SELECT pg_backend_pid()").fetchone()[0]
        jobid = conn.execute("SELECT jobid FROM cron.job WHERE jobname = %s", (intake,)).fetchone()
        conn.execute(
            "INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, "
            "command, status, start_time) VALUES (%s, nextval('cron.runid_seq'), %s, %s, "
            "current_user, 'SELECT 1', 'running', now())",
            (jobid[0], pid, db.name),
        )
        with started(drain_argv(db, "--pause-cron-job", intake, "--", "true")) as (drain, lines):
            assert lines.wait_for(f"intake paused pg_cron job={intake}")
            assert not active(db, intake)
            drain.send_signal(signal.SIGTERM)
            assert drain.wait(timeout=30) != 0
        # No command ran: the signal interrupted the drain, not `true`.
        assert lines.wait_for("leaseguard: drain interrupted; intake was resumed"), lines.text()
        assert active(db, intake)
        assert "in progress" not in lines.text()  # no driver text from the interrupted query


def test_a_signal_while_the_command_runs_ends_it_and_gives_intake_back(db, intake):
    with started(drain_argv(db, "--pause-cron-job", intake, "--", "sleep", "120")) as (
        drain,
        lines,
    ):
        assert lines.wait_for("intake held: running command sleep")
        drain.send_signal(signal.SIGTERM)
        assert drain.wait(timeout=30) == 1
    assert "drain interrupted (command sleep interrupted); intake was resumed" in lines.text()
    assert active(db, intake)


def test_a_signal_ends_the_commands_children_too_before_intake_comes_back(db, intake, tmp_path):
    """`-- sh -c 'restart-app; migrate'`: a SIGTERM to the drain ends sh AND the step it is
    running; a step left running after intake is given back runs beside new claims."""
    pid_file = tmp_path / "step.pid"
    step = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    script = f'{sys.executable} -c "{step}"; echo migrate'
    with started(drain_argv(db, "--pause-cron-job", intake, "--", "sh", "-c", script)) as (
        drain,
        lines,
    ):
        assert wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30), lines.text()
        step_pid = int(pid_file.read_text())
        drain.send_signal(signal.SIGTERM)
        assert drain.wait(timeout=30) == 1
    try:
        assert not _running(step_pid), "the command's child outlived the drain"
    finally:
        if _running(step_pid):
            os.kill(step_pid, signal.SIGKILL)
    assert active(db, intake)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


_UNSCHEDULE = "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = %s"
# What happens to the held job mid-drain, and whether the command may still run after it.
CHANGED = {
    "re-activated": (
        ["SELECT cron.alter_job(jobid, active := true) FROM cron.job WHERE jobname = %s"],
        False,
    ),
    "re-created": (
        [_UNSCHEDULE, "SELECT cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s)"],
        False,
    ),
    "deleted": ([_UNSCHEDULE], True),  # nothing left to claim with
}


@pytest.mark.parametrize("how", list(CHANGED))
def test_a_held_job_switched_back_on_mid_drain_fails_before_the_command(db, intake, tmp_path, how):
    """Something else re-activates (or deletes and re-creates) a held job while the drain
    waits: the verdict after it is no longer judged with intake held, so the command must
    not run under it ("intake: held" would be a lie). A job only deleted claims nothing."""
    statements, runs = CHANGED[how]
    with db.connect() as conn:
        conn.execute("INSERT INTO execution_runs VALUES (1, 'running', now(), now(), NULL)")
    ran = tmp_path / "ran"
    argv = drain_argv(db, "--pause-cron-job", intake, "--", "touch", str(ran))
    with started(argv) as (drain, lines):
        assert lines.wait_for("start live=1"), lines.text()
        with cron_conn(db) as conn:
            for statement in statements:
                conn.execute(statement, (intake, db.name)[: statement.count("%s")])
        with db.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id = 1")
        assert drain.wait(timeout=60) == (0 if runs else 1), lines.text()
    assert ran.exists() == runs
    if not runs:
        text = lines.text()
        assert f"intake no longer held: pg_cron job(s) {intake} active again" in text, text
        assert active(db, intake)


# --- the intake's own identity beside a read-only guard role ----------------------------------


def leaseguard(db, command: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "leaseguard", command, "--dsn", db.dsn_as("guard_ro"), *extra]
    return run(argv)


def test_the_guard_role_alone_cannot_hold_intake_and_fails_closed_naming_it(db, intake):
    ran = leaseguard(
        db, "drain", *FACTS, "--pause-cron-job", intake, "--cron-database", "postgres", "--", "true"
    )
    assert ran.returncode == 1, ran.stderr
    assert f"pg_cron job(s) not found: {intake} (as role guard_ro;" in ran.stderr
    assert "--cron-user" in ran.stderr
    assert active(db, intake)


def test_with_the_intake_identity_the_read_only_guard_holds_and_gives_back(db, intake):
    ran = leaseguard(
        db,
        "drain",
        *FACTS,
        "--pause-cron-job",
        intake,
        "--cron-database",
        "postgres",
        "--cron-user",
        "postgres",
        "--",
        "true",
    )
    assert ran.returncode == 0, ran.stderr
    assert f"intake paused pg_cron job={intake}" in ran.stderr
    assert active(db, intake)


def test_a_leftover_hold_is_named_and_resumed_only_as_the_jobs_owner(db, intake):
    with cron_conn(db) as conn:
        hold_jobs(conn, [intake], "fab drain pid 42 on ctl", "restart app1")  # then SIGKILL
    as_owner = ("--cron-database", "postgres", "--cron-user", "postgres")
    blind = leaseguard(db, "check", *FACTS, "--cron-database", "postgres")
    assert intake not in blind.stderr  # pg_cron hides the record from the guard role
    seen = leaseguard(db, "check", *FACTS, *as_owner)
    assert f"pg_cron job {intake} is still paused" in seen.stderr
    assert "by fab drain pid 42 on ctl (for: restart app1)" in seen.stderr
    refused = leaseguard(db, "resume", "--cron-database", "postgres")
    assert refused.returncode == 1
    assert (
        "role guard_ro sees no pg_cron job in database postgres" in refused.stdout + refused.stderr
    )
    assert not active(db, intake)
    # Check mode (the resume playbook's --check) refuses as the run does, and as the owner lists.
    with pytest.raises(DatabaseError, match="role guard_ro sees no pg_cron job in database"):
        resume_pauses(db.dsn_as("guard_ro"), IntakeAccess("postgres"), check_mode=True)
    preview = resume_pauses(
        db.dsn_as("guard_ro"), IntakeAccess("postgres", "postgres"), check_mode=True
    )
    assert [record["job"] for record in preview["records"]] == [intake]
    resumed = leaseguard(db, "resume", *as_owner)
    assert resumed.returncode == 0, resumed.stderr
    assert f"job={intake} state=resumed" in resumed.stdout
    assert active(db, intake)


# --- `leaseguard resume` and a holder that still runs ------------------------------------------


def resume_as_owner(db, *extra: str) -> subprocess.CompletedProcess[str]:
    return leaseguard(
        db, "resume", "--cron-database", "postgres", "--cron-user", "postgres", *extra
    )


@contextlib.contextmanager
def ends_the_command(go):
    """The drain's command waits for `go`: touched on the way out, whatever failed (a SIGKILLed
    drain leaves its command, in a session of its own, running)."""
    try:
        yield
    finally:
        go.touch()


def test_resume_keeps_a_running_drains_hold_and_gives_back_a_killed_ones(db, intake, tmp_path):
    """A drain still running its command is in its hold window: resume leaves its hold (the job
    stays paused, named, exit 75) unless --force; once the drain is SIGKILLed, resume gives it
    back."""
    go = tmp_path / "go"
    until_go = f"until [ -e {go} ]; do sleep 0.05; done"
    argv = drain_argv(db, "--pause-cron-job", intake, "--", "sh", "-c", until_go)
    with started(argv) as (drain, lines), ends_the_command(go):
        assert lines.wait_for("intake held: running command sh")
        kept = resume_as_owner(db)
        assert kept.returncode == 75, kept.stdout + kept.stderr
        assert f"job={intake} state=kept" in kept.stdout
        assert f"its holder (pid {drain.pid}) is still running" in kept.stdout
        assert not active(db, intake)
        again = resume_as_owner(db, "--json")
        assert again.returncode == 75 and json.loads(again.stdout)["kept"][0]["job"] == intake
        assert not active(db, intake)
        drain.kill()
        drain.wait(timeout=30)
        given_back = resume_as_owner(db)
        assert given_back.returncode == 0, given_back.stdout + given_back.stderr
        assert f"job={intake} state=resumed" in given_back.stdout
        assert active(db, intake)
        assert "recorded=0" in resume_as_owner(db).stdout


def test_resume_force_gives_back_a_running_drains_hold(db, intake, tmp_path):
    go = tmp_path / "go"
    until_go = f"until [ -e {go} ]; do sleep 0.05; done"
    argv = drain_argv(db, "--pause-cron-job", intake, "--", "sh", "-c", until_go)
    with started(argv) as (drain, lines), ends_the_command(go):
        assert lines.wait_for("intake held: running command sh")
        forced = resume_as_owner(db, "--force")
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert f"job={intake} state=resumed" in forced.stdout
        assert "resume --force: giving back" in forced.stderr
        assert active(db, intake)
        go.touch()
        drain.wait(timeout=60)


def test_resume_keeps_the_job_paused_while_one_of_two_holders_still_runs(db, intake):
    """Counted: a dead holder's record goes, the live one's keeps the job paused."""
    with cron_conn(db) as conn:
        hold_jobs(conn, [intake], "fab drain pid 42 on ctl", "restart app1")  # then SIGKILL
        live = hold_jobs(conn, [intake], "this test", "deploy", os.getpid())
    kept = resume_as_owner(db)
    assert kept.returncode == 75, kept.stdout + kept.stderr
    assert f"job={intake} state=still_held paused_at=" in kept.stdout
    assert f"job={intake} state=kept" in kept.stdout
    assert not active(db, intake)
    with cron_conn(db) as conn:
        assert [r.by for r in leftover_warnings_records(conn, intake)] == ["this test"]
        assert release_hold(conn, live) == ((intake,), {})
    assert active(db, intake)


def test_resume_keeps_a_hold_taken_on_another_machine(db, intake):
    with cron_conn(db) as conn:
        hold_jobs(conn, [intake], "fab drain", "deploy", os.getpid())
        conn.execute(
            "UPDATE cron.job SET command = replace(command, %s, %s) WHERE jobname LIKE %s",
            (f'"host": "{os.uname().nodename}"', '"host": "elsewhere"', f"%{intake}@%"),
        )
    kept = resume_as_owner(db)
    assert kept.returncode == 75 and "its holder runs on elsewhere" in kept.stdout
    assert not active(db, intake)
    assert resume_as_owner(db, "--force").returncode == 0
    assert active(db, intake)


def leftover_warnings_records(conn, job):
    from leaseguard.adapters.pauses import read_records

    return [r for r in read_records(conn) if r.job == job]


@pytest.mark.slow
def test_the_resume_playbook_keeps_a_hold_a_running_playbook_took(db, intake, tmp_path):
    """intake_hold's hold lasts while its ansible-playbook runs (not the task's worker): the
    resume module, a later task of it, keeps the hold; the release gives the job back."""
    import yaml

    from sandbox.pgcluster import SUPERUSER
    from tests.support.ansible_run import run_playbook, write_inventory

    connection = {
        "db_host": db.cluster.host,
        "db_port": db.cluster.port,
        "db_name": db.name,
        "db_user": SUPERUSER,
        "tunnel": False,
        "cron_database": "postgres",
    }
    hold = {"state": "held", "pause_cron_jobs": [intake], **connection}
    resume = {"resume_recorded": True, **connection}
    tasks = [
        {"name": "hold", "leaseguard.deploy.intake_hold": hold, "register": "held"},
        {"name": "preview", "leaseguard.deploy.cron_budget": resume, "check_mode": True},
        {"name": "resume", "leaseguard.deploy.cron_budget": resume},
        {
            "name": "release",
            "leaseguard.deploy.intake_hold": {
                "state": "released",
                "hold": "{{ held.hold }}",
                **connection,
                "pause_cron_jobs": [intake],
            },
        },
    ]
    play = [{"hosts": "app", "gather_facts": False, "tasks": tasks}]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = write_inventory(
        tmp_path / "inventory.yml", {"ctl": {"ansible_connection": "local"}}
    )
    run = run_playbook(path, inventory, tmp_path, env={"LEASEGUARD_DSN": ""})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    preview = run.result("preview", "ctl")  # --check says what the run would keep, not resume
    assert preview["records"] == [] and [k["job"] for k in preview["kept"]] == [intake]
    assert "would resume" not in preview["msg"] and "kept 1 live hold" in preview["msg"]
    resumed = run.result("resume", "ctl")
    assert resumed["resumed"] == [] and [k["job"] for k in resumed["kept"]] == [intake]
    assert "is still running" in resumed["warnings"][0]
    assert run.result("release", "ctl")["resumed"] == [intake]
    assert active(db, intake)


def test_resume_never_switches_on_a_job_re_created_under_the_held_name(db, intake):
    """The held job deleted, a job of the same name created switched off (an operator's):
    the record was of the deleted job, so resume deletes it and leaves the new one off."""
    with cron_conn(db) as conn:
        hold_jobs(conn, [intake], "fab drain pid 42 on ctl", "restart app1")  # then SIGKILL
        conn.execute("SELECT cron.unschedule(%s)", (intake,))
        conn.execute(
            "SELECT cron.alter_job(cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s),"
            " active := false)",
            (intake, db.name),
        )
    done = resume_as_owner(db)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job={intake} state=replaced" in done.stdout
    assert not active(db, intake)
    assert "recorded=0" in resume_as_owner(db).stdout


def test_a_release_never_switches_on_a_job_re_created_under_the_held_name(db, intake):
    with cron_conn(db) as conn:
        hold = hold_jobs(conn, [intake], "drain pid 1 on here")
        conn.execute("SELECT cron.unschedule(%s)", (intake,))
        conn.execute(
            "SELECT cron.alter_job(cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s),"
            " active := false)",
            (intake, db.name),
        )
        assert release_hold(conn, hold) == ((), {})
    assert not active(db, intake)


def test_resume_as_a_role_that_cannot_see_the_hold_says_so(db, intake):
    """pg_cron shows each role only its own jobs: a role owning other jobs sees no record of
    the hold, and must not report that nothing is left paused."""
    with cron_conn(db) as conn:
        conn.execute("DROP ROLE IF EXISTS other_owner")
        conn.execute("CREATE ROLE other_owner LOGIN")
        conn.execute("GRANT USAGE ON SCHEMA cron TO other_owner")
        conn.execute("SET ROLE other_owner")
        conn.execute("SELECT cron.schedule('others_job', '0 0 1 1 *', 'SELECT 1')")
        conn.execute("RESET ROLE")
        hold_jobs(conn, [intake], "fab drain pid 42 on ctl", "restart app1")  # then SIGKILL
    try:
        blind = leaseguard(
            db, "resume", "--cron-database", "postgres", "--cron-user", "other_owner"
        )
        assert blind.returncode == 0, blind.stdout + blind.stderr
        assert "recorded=0" in blind.stdout
        assert "role other_owner" in blind.stdout and "--cron-user" in blind.stdout
        assert not active(db, intake)
    finally:
        with cron_conn(db) as conn:
            conn.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = 'others_job'")
            conn.execute("DROP OWNED BY other_owner")
            conn.execute("DROP ROLE other_owner")
