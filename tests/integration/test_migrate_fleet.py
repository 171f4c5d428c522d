"""The migrate role judges once for the whole fleet of the play, never from the first host.

Real ansible-playbook over two (or three) hosts with a local connection and fixed lookups,
against a real PostgreSQL: the issue's reproductions defer, their mirror images proceed,
the decision does not depend on the inventory order, and a host that cannot answer fails
the gate by name with nothing migrated.
"""

import json
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from sandbox.pgcluster import GUARD_RO_ROLE
from sandbox.runs_table import create_runs_table
from tests.integration.test_cron_budget_module import CRON_DB, command, cron_jobs, jobs_for
from tests.support.ansible_run import run_playbook, write_inventory
from tests.support.busy_intake import active, cron_conn, intake_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAY = 86400
JUDGE = "Judge the claims by the system's own lease"


def host(timeout_s, started_ago_s, **extra):
    """A local host whose lookups are fixed: its task timeout and when its runtime started."""
    started = datetime.now(UTC) - timedelta(seconds=started_ago_s)
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "leaseguard_task_timeout": {"source": "fixed", "value_s": timeout_s},
        "leaseguard_runtime": {"source": "fixed", "started_at": started.isoformat()},
        **extra,
    }


@pytest.fixture
def fleet(tmp_path, db):
    """Run the migrate role over `hosts` (in the given order) with one claim in the table."""
    with db.connect() as conn:
        create_runs_table(conn)
    log = tmp_path / "migrated.log"

    def run(hosts, claimed_ago_s, *args, pre_tasks=(), static=False):
        with db.connect() as conn:
            conn.execute("TRUNCATE execution_runs")
            conn.execute(
                "INSERT INTO execution_runs (id, status, claimed_at) "
                "VALUES (1, 'running', now() - make_interval(secs => %s)), (2, 'open', null)",
                (claimed_ago_s,),
            )
        log.unlink(missing_ok=True)
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            hosts,
            leaseguard_db_host=db.cluster.host,
            leaseguard_db_port=db.cluster.port,
            leaseguard_db_name=db.name,
            leaseguard_db_user=GUARD_RO_ROLE,
            leaseguard_migrate_command=["sh", "-c", f"echo migrated >> {log}"],
        )
        play = {
            "hosts": "app",
            "gather_facts": False,
            "tasks": [
                *pre_tasks,
                {
                    "name": "Run the migrate role",
                    "ansible.builtin.include_role": {"name": "leaseguard.deploy.migrate"},
                },
            ],
        }
        # The role as its README shows it: its tasks named, so --start-at-task finds them.
        if static:
            role = static if isinstance(static, dict) else "leaseguard.deploy.migrate"
            play = {"hosts": "app", "gather_facts": False, "roles": [role]}
        path = tmp_path / "play.yml"
        path.write_text(yaml.safe_dump([play], sort_keys=False))
        outcome = run_playbook(path, inventory, tmp_path, *args)
        outcome.migrations = log.read_text().count("migrated") if log.exists() else 0
        return outcome

    return run


def verdict_of(run):
    """The one fleet verdict (run_once: registered on the host it ran from)."""
    results = [r for r in run.results(JUDGE).values() if not r.get("skipped")]
    assert len(results) == 1, run.stdout[-3000:]
    return results[0]


def judged_from(run):
    """The host the run_once judgment ran from (the verdict's own host is "fleet")."""
    return next(host for host, r in run.results(JUDGE).items() if not r.get("skipped"))


def reversed_hosts(hosts):
    return dict(reversed(list(hosts.items())))


# Each case: per-host (timeout, started ago), claim age, decision, lease_from, cut-off from.
# Starts differ by a minute at least: start times are compared in the database clock, so two
# starts closer than the clock measurements' precision may name either host as the cut-off's.
CASES = {
    # The first reproduction: app1 restarted 10 min ago, app2 up a day, a claim 1 h
    # old. app1's start alone would call it an orphan; it may be running on app2.
    "recent-restart-on-first-host-defers": (
        {"app1": (3600, 600), "app2": (3600, DAY)},
        3600,
        "defer",
        "app1",
        "app2",
    ),
    # Its mirror: a claim older than EVERY host's start is an orphan everywhere.
    "claim-older-than-every-start-proceeds": (
        {"app1": (3600, 600), "app2": (3600, 3600)},
        5400,
        "proceed",
        "app1",
        "app2",
    ),
    # The second: mid-rollout config change, app1 at 60 s, app2 at 3600 s, a claim 10 min old.
    # app1's 120 s lease alone would call it stale; app2's 7200 s lease still covers it.
    "short-timeout-on-first-host-defers": (
        {"app1": (60, DAY + 60), "app2": (3600, DAY)},
        600,
        "defer",
        "app2",
        "app1",
    ),
    # Its mirror: past every host's lease, the claim is the reaper's.
    "claim-past-every-lease-proceeds": (
        {"app1": (60, DAY + 60), "app2": (3600, DAY)},
        7200 + 60,
        "proceed",
        "app2",
        "app1",
    ),
}


def unschedule_declared_jobs(db):
    """The budgets' pg_cron jobs of `db` (named after it) gone from the cron database."""
    with db.cluster.connect(CRON_DB, socket=True) as conn:
        conn.execute(
            "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s",
            (f"{db.name}\\_%",),
        )


@pytest.mark.parametrize("order", ["inventory-order", "reversed-order"])
@pytest.mark.parametrize(
    ("facts", "claimed_ago_s", "decision", "lease_from", "cutoff_from"),
    CASES.values(),
    ids=CASES.keys(),
)
def test_the_migration_is_judged_once_with_every_hosts_facts(
    fleet, facts, claimed_ago_s, decision, lease_from, cutoff_from, order
):
    hosts = {name: host(*values) for name, values in facts.items()}
    if order == "reversed-order":
        hosts = reversed_hosts(hosts)
    run = fleet(hosts, claimed_ago_s)
    verdict = verdict_of(run)
    assert verdict["decision"] == decision, run.stdout[-3000:]
    assert verdict["fleet"]["hosts"] == ["app1", "app2"]
    assert verdict["fleet"]["lease_from"] == lease_from
    assert verdict["fleet"]["orphan_cutoff_from"] == cutoff_from
    assert set(verdict["fleet"]["clock_offsets_s"]) == {"app1", "app2"}
    assert verdict["lease_s"] == 2 * facts[lease_from][0]
    assert verdict["task_timeout_source"] == f"{lease_from}:fixed"
    if decision == "defer":
        assert run.returncode != 0
        assert run.migrations == 0
        refusal = run.result("Defer the migration while work is in flight", judged_from(run))
        assert "judged once for app1, app2" in refusal["msg"]
        assert f"orphan cut-off from {cutoff_from}" in refusal["msg"]
    else:
        assert run.returncode == 0, run.stdout[-3000:]
        assert run.migrations == 1  # once for the fleet, not once per host


def test_every_host_is_looked_up_not_only_the_first(fleet):
    run = fleet({"app1": host(3600, DAY), "app2": host(3600, DAY), "app3": host(60, 60)}, 30)
    lookups = run.results("Look up the configured task timeout and the runtime start time")
    assert sorted(lookups) == ["app1", "app2", "app3"]
    assert all(not result.get("failed") for result in lookups.values())
    assert verdict_of(run)["fleet"]["hosts"] == ["app1", "app2", "app3"]


def test_a_host_whose_lookup_fails_fails_the_gate_by_name_and_nothing_is_migrated(fleet, tmp_path):
    broken = host(3600, DAY)
    broken["leaseguard_task_timeout"] = {
        "source": "env_file",
        "path": str(tmp_path / "missing.env"),
        "variable": "APP_TASK_TIMEOUT_S",
    }
    # The claim is past every lease the healthy host knows: only app2's failure stops it.
    for hosts in (
        {"app1": host(3600, DAY), "app2": broken},
        {"app2": broken, "app1": host(60, DAY)},
    ):
        run = fleet(hosts, 3 * 3600)
        assert run.returncode != 0
        assert run.migrations == 0
        verdict = verdict_of(run)
        assert verdict["failed"] is True and verdict["decision"] == "failed"
        assert "host app2: its lookup failed" in verdict["msg"], verdict["msg"]
        assert "app1:" not in verdict["msg"]


def test_a_host_that_failed_earlier_in_the_play_fails_the_gate_by_name(fleet):
    fail_app2 = {
        "name": "Something else fails on app2 first",
        "ansible.builtin.fail": {"msg": "broken before the migration"},
        "when": "inventory_hostname == 'app2'",
    }
    run = fleet({"app1": host(3600, DAY), "app2": host(3600, DAY)}, 3 * 3600, pre_tasks=[fail_app2])
    assert run.returncode != 0
    assert run.migrations == 0
    verdict = verdict_of(run)
    assert verdict["decision"] == "failed"
    assert "host app2: no lookup result" in verdict["msg"], verdict["msg"]


LIMIT_REFUSAL = "Refuse to judge the migration for a fleet cut short by --limit"


def test_a_limited_run_refuses_the_migration_naming_the_limit(fleet):
    """--limit app1 leaves app2 out of ansible_play_hosts_all: app2's claim, older than app1's
    restart, would be an orphan and migrated under. The role refuses before any lookup."""
    hosts = {"app1": host(3600, 600), "app2": host(3600, DAY)}
    run = fleet(hosts, 3600, "--limit", "app1")
    assert run.returncode != 0
    assert run.migrations == 0
    refusal = run.result(LIMIT_REFUSAL, "app1")
    assert refusal["failed"] is True
    assert "--limit app1 leaves hosts out" in refusal["msg"], refusal["msg"]
    assert "Run without --limit" in refusal["msg"]
    assert not run.results(JUDGE)  # nothing judged, nothing paused
    # Without --limit the same fleet is judged whole: the claim may be app2's, it defers...
    run = fleet(hosts, 3600)
    assert verdict_of(run)["decision"] == "defer"
    assert run.migrations == 0
    # ... and a claim older than every start proceeds, once, as before.
    run = fleet(hosts, 2 * DAY)
    assert (run.returncode, run.migrations) == (0, 1), run.stdout[-3000:]
    assert not run.result(LIMIT_REFUSAL, "app1").get("failed")


REFUSED = "Refuse a migration its fleet judgment did not allow"


@pytest.mark.parametrize(
    "start", ["Run the migration command", "Apply the pg_cron statement budgets"]
)
def test_a_run_started_past_the_judgment_migrates_nothing(fleet, db, start):
    """--start-at-task skips the limit refusal, the lookups, the hold and the judgment: the
    migration and the budgets themselves refuse to run without this run's verdict over every
    host (a live claim here)."""
    hosts = {"app1": host(3600, DAY), "app2": host(3600, DAY)}
    budgets = {
        "leaseguard_cron_budgets": {"jobs": jobs_for(db.name)},
        "leaseguard_cron_database": CRON_DB,
        "leaseguard_migrate_db_user": "postgres",
    }
    try:
        run = fleet(hosts, 60, "--start-at-task", start, "-e", json.dumps(budgets), static=True)
        scheduled = cron_jobs(db.cluster, db.name)
    finally:
        unschedule_declared_jobs(db)
    assert run.returncode != 0
    assert run.migrations == 0, run.stdout[-3000:]
    assert scheduled == {}, run.stdout[-3000:]
    refusal = run.result(REFUSED, "app1")
    assert "no judgment of this run covers every host of the play" in refusal["msg"]
    assert "Nothing was migrated" in refusal["msg"]


def test_a_limited_run_started_past_its_refusal_migrates_nothing(fleet):
    """--limit app1 with --start-at-task past the limit refusal: app1 alone is looked up and
    judged (its restart makes the claim an orphan, though it may be running on app2)."""
    hosts = {"app1": host(3600, 600), "app2": host(3600, DAY)}
    lookup = "Look up the task timeout and the runtime start time on every host"
    run = fleet(hosts, 3600, "--limit", "app1", "--start-at-task", lookup, static=True)
    assert run.returncode != 0
    assert run.migrations == 0, run.stdout[-3000:]
    refusal = run.result(JUDGE, "app1")  # the fleet judgment itself refuses a limited fleet
    assert refusal["failed"] is True
    assert "--limit app1 leaves hosts out (only app1 would be judged" in refusal["msg"]
    # Started at the same task over the whole fleet, the judgment runs and the migration too.
    run = fleet(hosts, 2 * DAY, "--start-at-task", lookup, static=True)
    assert (run.returncode, run.migrations) == (0, 1), run.stdout[-3000:]
    assert run.result(REFUSED, "app1").get("skipped")


def test_a_caller_ignoring_errors_migrates_nothing_on_a_defer(fleet):
    """`ignore_errors: true` on the role: the defer is ignored, the migration is not run on it,
    and nothing reports a migration. Past every lease, the same play migrates once."""
    hosts = {"app1": host(3600, DAY), "app2": host(3600, DAY)}
    role = {"role": "leaseguard.deploy.migrate", "ignore_errors": True}
    run = fleet(hosts, 60, static=role)
    assert run.migrations == 0, run.stdout[-3000:]
    assert "the fleet judgment decided defer" in run.result(REFUSED, "app1")["msg"]
    assert run.result("Report the migration", "app1").get("skipped")
    run = fleet(hosts, 3 * 3600, static=role)
    assert (run.returncode, run.migrations) == (0, 1), run.stdout[-3000:]
    assert "migrated from app1" in run.result("Report the migration", "app1")["msg"]


def test_every_hosts_own_pause_command_is_held_through_the_migration(fleet, tmp_path):
    """Intake held by a pause command per host (leaseguard_pause_command, as the restart role
    and drain.yml hold it): every host's is run before the verdict and its resume only after
    the migration, not the migration run beside claiming hosts."""
    log = tmp_path / "migrated.log"
    hosts = {
        name: host(
            3600,
            600,
            leaseguard_pause_command=["sh", "-c", f"echo paused-{name} >> {log}"],
            leaseguard_resume_command=["sh", "-c", f"echo resumed-{name} >> {log}"],
        )
        for name in ("app1", "app2")
    }
    run = fleet(hosts, 5400)
    assert run.returncode == 0, run.stdout[-3000:]
    assert verdict_of(run)["decision"] == "proceed"
    lines = log.read_text().split()
    assert sorted(lines[:2]) == ["paused-app1", "paused-app2"], lines
    assert lines[2] == "migrated", lines
    assert sorted(lines[3:]) == ["resumed-app1", "resumed-app2"], lines


PRECHECK = "Check the pg_cron statement budgets before migrating"


def test_budgets_that_would_be_refused_stop_the_run_before_the_migration(fleet, db):
    """A drifted live budget (or a budget declaration in error) refuses the budgets step: found
    only after the migration, the schema was already migrated for code that is then never
    deployed. Found first, nothing is paused or migrated; without drift the run migrates."""
    hosts = {"app1": host(3600, DAY), "app2": host(3600, DAY)}
    publish = f"{db.name}_publish"
    budgets = {
        "leaseguard_cron_budgets": {"jobs": jobs_for(db.name)},
        "leaseguard_cron_database": CRON_DB,
        "leaseguard_migrate_db_user": "postgres",
    }
    try:
        run = fleet(hosts, 2 * DAY, "-e", json.dumps(budgets))
        assert (run.returncode, run.migrations) == (0, 1), run.stdout[-3000:]
        with db.cluster.connect(CRON_DB, socket=True) as conn:
            conn.execute(
                "SELECT cron.alter_job(jobid, command := %s) FROM cron.job WHERE jobname = %s",
                (command("6s", "publish"), publish),
            )
        unset_environment = {**budgets, "leaseguard_cron_budget_overrides": {publish: "6s"}}
        for extra, expected in (
            (budgets, f"job {publish}: live=6s declared=3s (default)"),
            (unset_environment, "overrides need environment"),
        ):
            run = fleet(hosts, 2 * DAY, "-e", json.dumps(extra))
            assert run.returncode != 0
            assert run.migrations == 0, run.stdout[-3000:]
            assert expected in run.result(PRECHECK, "app1")["msg"]
            assert all(r.get("skipped") for r in run.results(JUDGE).values())
        scheduled = cron_jobs(db.cluster, db.name)
    finally:
        unschedule_declared_jobs(db)
    assert scheduled[publish][0] == command("6s", "publish")  # left as it was


def test_the_migrations_pg_cron_hold_waits_only_leaseguard_quiet_timeout_s(db, tmp_path):
    """leaseguard_quiet_timeout_s bounds the wait for a run of a held job already in progress,
    for the migration's hold as for the restart's (it waited the default 120 s): past it the
    hold fails closed, nothing is migrated and the job is given back; once the run is over
    the same deploy migrates."""
    log = tmp_path / "migrated.log"
    with intake_job(db) as job, cron_conn(db) as conn, cron_conn(db) as running:
        jobid = conn.execute("SELECT jobid FROM cron.job WHERE jobname = %s", (job,)).fetchone()[0]
        conn.execute(
            "INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, "
            "command, status, start_time) VALUES (%s, nextval('cron.runid_seq'), "
            "%s, %s, current_user, 'SELECT 1', 'running', now())",
            (jobid, running.info.backend_pid, db.name),
        )
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            {"app1": host(3600, 600)},
            leaseguard_db_host=db.cluster.host,
            leaseguard_db_port=db.cluster.port,
            leaseguard_db_name=db.name,
            leaseguard_db_user=GUARD_RO_ROLE,
            leaseguard_migrate_db_user="postgres",
            leaseguard_cron_database=CRON_DB,
            leaseguard_migrate_pause_cron_jobs=[job],
            leaseguard_quiet_timeout_s=1,
            leaseguard_migrate_command=["sh", "-c", f"echo migrated >> {log}"],
        )
        play = tmp_path / "play.yml"
        play.write_text(
            yaml.safe_dump(
                [{"hosts": "app", "gather_facts": False, "roles": ["leaseguard.deploy.migrate"]}]
            )
        )
        began = time.monotonic()
        run = run_playbook(play, inventory, tmp_path, timeout=200)
        assert run.returncode == 2, run.stdout[-3000:]
        held = run.result("Hold the intake pg_cron jobs", "app1")
        assert "still in progress 1s after the pause" in held["msg"], held["msg"]
        assert time.monotonic() - began < 60
        assert not log.exists() and active(db, job)
        running.close()
        run = run_playbook(play, inventory, tmp_path)
        assert run.returncode == 0, run.stdout[-3000:]
        assert log.read_text().split() == ["migrated"] and active(db, job)


def test_a_hosts_own_intake_that_was_not_held_stops_the_migration(fleet, tmp_path):
    """app2's pause command fails: app2 drops out of the play, and without its hold the
    migration would run beside app2's claims (a play without any_errors_fatal). Refused."""
    log = tmp_path / "intake.log"

    def intake(host, pause):
        resume = ["sh", "-c", f"echo resumed-{host} >> {log}"]
        return {"leaseguard_pause_command": pause, "leaseguard_resume_command": resume}

    paused = ["sh", "-c", f"echo paused-app1 >> {log}"]
    hosts = {
        "app1": host(3600, DAY, **intake("app1", paused)),
        "app2": host(3600, DAY, **intake("app2", ["sh", "-c", "exit 3"])),
    }
    run = fleet(hosts, 3 * 3600)
    assert run.returncode != 0
    assert run.migrations == 0, run.stdout[-3000:]
    refusal = run.result(REFUSED, "app1")["msg"]
    assert "the intake of app2 was not held" in refusal, refusal
    # app1's given back; app2's resume command run after its pause failed half way.
    assert sorted(log.read_text().split()) == ["paused-app1", "resumed-app1", "resumed-app2"]


def test_a_pg_cron_hold_that_failed_under_ignore_errors_migrates_nothing(fleet):
    hosts = {"app1": host(3600, DAY), "app2": host(3600, DAY)}
    role = {"role": "leaseguard.deploy.migrate", "ignore_errors": True}
    extra = {
        "leaseguard_migrate_pause_cron_jobs": ["no_such_job"],
        "leaseguard_cron_database": "postgres",
        "leaseguard_migrate_db_user": "postgres",
    }
    run = fleet(hosts, 3 * 3600, "-e", json.dumps(extra), static=role)
    assert run.migrations == 0, run.stdout[-3000:]
    assert "the intake pg_cron jobs were not held" in run.result(REFUSED, "app1")["msg"]
