"""pg_cron statement budgets against a real PostgreSQL 15 with pg_cron (cron.job lives in the
`postgres` database; the jobs run in each test's own database).

What reaches cron.job, and what pg_cron does with it, is tested here; which job gets which
decision is the pure planning's, tested in tests/unit/test_budgets.py.
"""

import contextlib
import json
import re
import subprocess
import sys
import time

import pytest
import yaml
from psycopg import sql

from leaseguard.adapters.budgets import converge_jobs
from leaseguard.core.budgets.config import BudgetConfig, budget_config_from_mapping, render_command
from leaseguard.core.budgets.planning import Action
from leaseguard.core.errors import DatabaseError
from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from sandbox.subprocess_env import clean_env
from tests.support.pg_fixtures import fresh_database

pytestmark = pytest.mark.integration

CRON_DB = "postgres"
FUNCTIONS = {
    "claim": "claim_stats_projection_job_v1",
    "compute": "compute_stats_projection_job_v1",
    "publish": "publish_stats_projection_job_v1",
}
DEFAULTS = {"claim": "3s", "compute": "60s", "publish": "3s"}


def job_in(plan, name):
    return next(job for job in plan.jobs if job.job.name == name)


def section(prefix, *, overrides=None, budgets=None, functions=None):
    """The issue's cron_budgets section, with job names unique to this test."""
    budgets = {**DEFAULTS, **(budgets or {})}
    functions = {**{k: f"public.{v}" for k, v in FUNCTIONS.items()}, **(functions or {})}
    return {
        "jobs": {
            f"{prefix}_{step}": {
                "schedule": "* * * * *",
                "function": functions[step],
                "budget": budgets[step],
            }
            for step in FUNCTIONS
        },
        "overrides": {
            env: {f"{prefix}_{step}": budget for step, budget in steps.items()}
            for env, steps in (overrides or {}).items()
        },
    }


PRODUCTION = {"production": {"publish": "6s"}}


def cron_jobs(cluster, prefix):
    """{jobname: (schedule, command, database, active)} read back through psql."""
    assert re.fullmatch(r"t_[0-9a-f]+", prefix)  # a fresh_database name: safe in a literal
    query = f"SELECT jobname, schedule, command, database, active FROM cron.job WHERE jobname LIKE '{prefix}\\_%' ORDER BY jobname"  # noqa: E501, S608
    out = cluster.psql(query, dbname=CRON_DB)
    rows = [line.split("|") for line in out.splitlines() if line]
    return {
        name: (schedule, command, database, active)
        for name, schedule, command, database, active in rows
    }


def unschedule(cluster, prefix):
    with cluster.connect(CRON_DB) as conn:
        conn.execute(
            "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s",
            (f"{prefix}\\_%",),
        )


def unschedule_job(cluster, name):
    """A job removed by hand: the next run declares it missing."""
    with cluster.connect(CRON_DB) as conn:
        conn.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = %s", (name,))


def alter_command(cluster, name, command):
    """A change made by hand in production, behind the deploy's back."""
    with cluster.connect(CRON_DB) as conn:
        conn.execute(
            "SELECT cron.alter_job(jobid, command := %s) FROM cron.job WHERE jobname = %s",
            (command, name),
        )


@contextlib.contextmanager
def app_database(cluster):
    """A fresh database with the three step functions; its jobs are unscheduled at the end."""
    with fresh_database(cluster) as db:
        with db.connect() as conn:
            for function in [*FUNCTIONS.values(), "over_budget", "within_budget"]:
                conn.execute(f"CREATE FUNCTION public.{function}() RETURNS void LANGUAGE sql AS ''")
        try:
            yield db
        finally:
            unschedule(cluster, db.name)


@pytest.fixture
def app(pg_cluster):
    with app_database(pg_cluster) as db:
        yield db


def converge(db, config: BudgetConfig, environment=None, **kw):
    declared = config.declare(environment)
    return converge_jobs(contextlib.nullcontext(db.dsn), declared, cron_database=CRON_DB, **kw)[0]


def config_for(db, **kw) -> BudgetConfig:
    return budget_config_from_mapping(section(db.name, **kw))


# --- converging -------------------------------------------------------------------------------


def test_first_run_creates_the_jobs_and_a_second_run_changes_nothing(app):
    config = config_for(app)
    first = converge(app, config)
    assert first.changed and first.applied and first.converged
    assert {job.action for job in first.jobs} == {Action.CREATE}
    jobs = cron_jobs(app.cluster, app.name)
    assert jobs[f"{app.name}_compute"] == (
        "* * * * *",
        'set statement_timeout = \'60s\'; select "public"."compute_stats_projection_job_v1"();',
        app.name,
        "t",
    )
    second = converge(app, config)
    assert not second.changed and second.converged
    assert {job.action for job in second.jobs} == {Action.UNCHANGED}
    assert cron_jobs(app.cluster, app.name) == jobs


def test_check_mode_computes_the_same_plan_and_writes_nothing(app):
    config = config_for(app)
    plan = converge(app, config, check_mode=True)
    assert plan.changed and not plan.applied and not plan.converged
    assert {job.action for job in plan.jobs} == {Action.CREATE}
    assert cron_jobs(app.cluster, app.name) == {}


def test_the_production_override_survives_a_routine_run_and_staging_stays_3s(app, pg_cluster):
    with app_database(pg_cluster) as staging:
        converge(app, config_for(app, overrides=PRODUCTION), "production")
        converge(staging, config_for(staging, overrides=PRODUCTION), "staging")
        # the routine deploy: same declarations, each with its environment
        prod_run = converge(app, config_for(app, overrides=PRODUCTION), "production")
        staging_run = converge(staging, config_for(staging, overrides=PRODUCTION), "staging")
        assert not prod_run.changed and not staging_run.changed
        publish = job_in(prod_run, f"{app.name}_publish")
        assert (publish.live_budget_ms, publish.job.source_label) == (6000, "override:production")
        assert job_in(staging_run, f"{staging.name}_publish").live_budget_ms == 3000
        assert "'6s'" in cron_jobs(pg_cluster, app.name)[f"{app.name}_publish"][1]
        assert "'3s'" in cron_jobs(pg_cluster, staging.name)[f"{staging.name}_publish"][1]


# (live command, the job's decision, on_drift): each refuses the whole plan.
REFUSED = {
    "drift": (
        "publish",
        "SET statement_timeout TO '6s'; SELECT public.publish_stats_projection_job_v1()",
        Action.DRIFT,
        "report",
    ),
    "unparseable": (
        "claim",
        "set statement_timeout = '3s'; select public.claim_stats_projection_job_v1(); select 1",
        Action.UNPARSEABLE,
        "apply",
    ),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_refused_job_keeps_every_job_from_being_written(app, kind):
    """All or nothing: the missing compute job is not created while another job is refused."""
    step, hand_made, action, on_drift = REFUSED[kind]
    config = config_for(app)
    converge(app, config)
    name = f"{app.name}_{step}"
    alter_command(app.cluster, name, hand_made)
    unschedule_job(app.cluster, f"{app.name}_compute")
    before = cron_jobs(app.cluster, app.name)
    plan = converge(app, config, "staging", on_drift=on_drift)
    assert job_in(plan, name).action is action
    assert job_in(plan, f"{app.name}_compute").action is Action.CREATE
    assert plan.changed and not plan.applied and not plan.converged
    assert cron_jobs(app.cluster, app.name) == before
    assert before[name][1] == hand_made and f"{app.name}_compute" not in before


def test_on_drift_apply_overwrites_the_drifted_command(app):
    config = config_for(app)
    converge(app, config)
    name = f"{app.name}_publish"
    alter_command(app.cluster, name, "set statement_timeout = '6s'; select public.x()")
    plan = converge(app, config, on_drift="apply")
    assert plan.changed and plan.applied and plan.converged
    assert cron_jobs(app.cluster, app.name)[name][1] == render_command(
        config.declare().jobs[2].function, 3000
    )


def test_a_schedule_change_leaves_the_live_command_spelled_as_it_was(app):
    """Only what differs is written: a new schedule keeps the live command's own spelling; a
    budget applied rewrites the command."""
    converge(app, config_for(app))
    name = f"{app.name}_claim"
    spelled = "SET statement_timeout TO '3s'; SELECT public.claim_stats_projection_job_v1();"
    alter_command(app.cluster, name, spelled)
    data = section(app.name)
    data["jobs"][name]["schedule"] = "*/5 * * * *"
    plan = converge(app, budget_config_from_mapping(data))
    assert job_in(plan, name).changes == ("schedule",) and plan.applied
    assert cron_jobs(app.cluster, app.name)[name][:2] == ("*/5 * * * *", spelled)
    data["jobs"][name]["budget"] = "4s"
    converge(app, budget_config_from_mapping(data), on_drift="apply")
    assert cron_jobs(app.cluster, app.name)[name][1] == render_command(
        job_in(plan, name).job.function, 4000
    )


def test_a_schedule_pg_cron_refuses_rolls_back_the_whole_run(app):
    data = section(app.name)
    data["jobs"][f"{app.name}_publish"]["schedule"] = "every now and then"
    with pytest.raises(DatabaseError) as caught:
        converge(app, budget_config_from_mapping(data))
    assert str(caught.value).startswith(
        f"pg_cron refused writing pg_cron job {app.name}_publish in database postgres "
        "(InvalidParameterValue, SQLSTATE 22023)"
    )
    assert cron_jobs(app.cluster, app.name) == {}  # claim and compute were rolled back


# --- a budget bounds a job -------------------------------------------------------------------


@pytest.mark.slow
def test_a_budget_actually_bounds_the_job_pg_cron_runs(app):
    """Each job runs under its own budget: the 1 s job is cancelled by statement_timeout,
    the 3 s job's 1.5 s call completes. pg_cron 1.4 has no seconds schedules: both run at
    the next minute boundary, so the test waits (with a deadline) until job_run_details
    holds a finished run of each; it never measures how long a run took."""
    with app.connect() as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION public.over_budget() RETURNS void "
            "LANGUAGE sql AS 'SELECT pg_sleep(3)'"
        )
        conn.execute(
            "CREATE OR REPLACE FUNCTION public.within_budget() RETURNS void "
            "LANGUAGE sql AS 'SELECT pg_sleep(1.5)'"
        )
    over, within = f"{app.name}_over", f"{app.name}_within"
    config = budget_config_from_mapping(
        {
            "jobs": {
                over: {"schedule": "* * * * *", "function": "public.over_budget", "budget": "1s"},
                within: {
                    "schedule": "* * * * *",
                    "function": "public.within_budget",
                    "budget": "3s",
                },
            }
        }
    )
    converge(app, config)
    with app.cluster.connect(CRON_DB) as conn:
        ids = dict(
            conn.execute(
                "SELECT jobname, jobid FROM cron.job WHERE jobname = ANY(%s)", ([over, within],)
            ).fetchall()
        )
        runs = {}
        deadline = time.monotonic() + 90
        while len(runs) < 2 and time.monotonic() < deadline:
            rows = conn.execute(
                "SELECT DISTINCT ON (jobid) jobid, status, return_message "
                "FROM cron.job_run_details "
                "WHERE jobid = ANY(%s) AND status IN ('succeeded', 'failed') "
                "ORDER BY jobid, runid",
                (list(ids.values()),),
            ).fetchall()
            runs = {jobid: row for jobid, *row in rows}
            time.sleep(0.2)
    unschedule(app.cluster, app.name)
    assert len(runs) == 2, f"pg_cron ran {len(runs)} of 2 jobs within 90 s"
    status, message = runs[ids[over]]
    assert status == "failed"
    assert "canceling statement due to statement timeout" in message
    assert runs[ids[within]][0] == "succeeded"  # 1.5 s: past the other job's budget


# --- the CLI ----------------------------------------------------------------------------------


def budgets_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "leaseguard", "budgets", *args],
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        timeout=60,
        check=False,
    )


@pytest.fixture
def config_file(app, tmp_path):
    path = tmp_path / "leaseguard.yaml"
    path.write_text(
        yaml.safe_dump({"leaseguard": {"cron_budgets": section(app.name, overrides=PRODUCTION)}})
    )
    return path


def cli_args(app, config_file, *extra):
    return ["--config", str(config_file), "--dsn", app.dsn, "--cron-database", CRON_DB, *extra]


def test_cli_reports_missing_jobs_without_writing_them_then_applies(app, config_file):
    done = budgets_cli(*cli_args(app, config_file))
    assert done.returncode == 3, done.stderr
    assert "not applied (read-only run)" in done.stderr
    assert cron_jobs(app.cluster, app.name) == {}
    done = budgets_cli(*cli_args(app, config_file, "--environment", "production", "--apply"))
    assert done.returncode == 0, done.stderr
    assert (
        f"job={app.name}_publish live=- declared=6s source=override:production state=created"
        in (done.stdout)
    )


def test_cli_exits_0_when_converged(app, config_file):
    converge(app, config_for(app, overrides=PRODUCTION), "production")
    done = budgets_cli(*cli_args(app, config_file, "--environment", "production"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith(
        f"leaseguard budgets job={app.name}_claim live=3s declared=3s source=default "
        "state=unchanged"
    )
    assert lines[2].endswith(
        f"job={app.name}_publish live=6s declared=6s source=override:production state=unchanged"
    )
    assert done.stderr == ""


def test_cli_exits_3_on_drift_and_changes_nothing(app, config_file):
    converge(app, config_for(app, overrides=PRODUCTION), "production")
    unschedule_job(app.cluster, f"{app.name}_claim")
    before = cron_jobs(app.cluster, app.name)
    done = budgets_cli(*cli_args(app, config_file, "--environment", "staging", "--apply", "--json"))
    assert done.returncode == 3, done.stderr
    document = json.loads(done.stdout)
    publish = next(job for job in document["jobs"] if job["job"] == f"{app.name}_publish")
    assert (publish["state"], publish["live_budget"], publish["declared_budget"]) == (
        "drift",
        "6s",
        "3s",
    )
    assert (document["applied"], document["converged"]) == (False, False)
    assert document["refusals"] == [f"job {app.name}_publish: live=6s declared=3s (default)"]
    assert f"drift: job {app.name}_publish live=6s declared=3s (default)" in done.stderr
    assert (
        f"not applied: {app.name}_claim; nothing is written while a job drifts or is refused "
        f"(job {app.name}_publish: live=6s declared=3s (default))"
    ) in done.stderr
    assert cron_jobs(app.cluster, app.name) == before


def test_cli_exits_1_when_the_database_is_unreachable_without_leaking_the_password(
    app, config_file
):
    dsn = f"postgresql://{GUARD_PW_ROLE}:{GUARD_PW_PASSWORD}@127.0.0.1:1/{app.name}"
    done = budgets_cli("--config", str(config_file), "--dsn", dsn + "?connect_timeout=3")
    assert done.returncode == 1
    assert "state=failed error=DatabaseUnavailable" in done.stdout
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/" in done.stderr
    for leak in (GUARD_PW_PASSWORD, "postgresql://", f"{GUARD_PW_ROLE}:"):
        assert leak not in done.stdout + done.stderr


def test_cli_exits_1_on_a_wrong_password_without_leaking_it(app, config_file):
    dsn = app.dsn_as(GUARD_PW_ROLE, password="hunter2-wrong")
    done = budgets_cli(*cli_args(app, config_file, "--json"), "--dsn", dsn)
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["type"] == "DatabaseUnavailable"
    assert "authentication failed" in done.stderr
    assert "hunter2-wrong" not in done.stdout + done.stderr


def test_cli_exits_1_when_the_role_may_not_schedule_and_writes_nothing(app, config_file):
    dsn = app.dsn_as(GUARD_PW_ROLE, password=GUARD_PW_PASSWORD)
    done = budgets_cli(*cli_args(app, config_file, "--apply"), "--dsn", dsn)
    assert done.returncode == 1
    assert "permission denied (InsufficientPrivilege, SQLSTATE 42501)" in done.stderr
    assert GUARD_PW_PASSWORD not in done.stdout + done.stderr
    assert cron_jobs(app.cluster, app.name) == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "budgets needs --config FILE with a cron_budgets section"),
        (("--on-drift", "ignore"), "invalid choice: 'ignore'"),
    ],
)
def test_cli_usage_errors_exit_2(app, args, message):
    done = budgets_cli("--dsn", app.dsn, *args)
    assert done.returncode == 2
    assert message in done.stderr


def test_cli_rejects_a_hostile_config_with_exit_2_and_writes_nothing(app, tmp_path):
    path = tmp_path / "hostile.yaml"
    path.write_text(
        yaml.safe_dump(
            {"cron_budgets": section(app.name, functions={"claim": "public.f; drop table t"})}
        )
    )
    done = budgets_cli(*cli_args(app, path, "--apply"))
    assert done.returncode == 2
    assert (
        f"cron_budgets.jobs.{app.name}_claim.function = 'public.f; drop table t' contains ';'"
        in (done.stderr)
    )
    assert cron_jobs(app.cluster, app.name) == {}


def test_cli_without_the_cron_database_fails_closed_naming_it(app, config_file):
    done = budgets_cli("--config", str(config_file), "--dsn", app.dsn)
    assert done.returncode == 1
    assert done.stderr == (
        f"leaseguard: budgets failed: pg_cron's cron.job is not usable in database {app.name}: "
        "connect to the database named by cron.database_name (where CREATE EXTENSION pg_cron "
        "ran)\n"
    )


@contextlib.contextmanager
def own_jobs_role(cluster, name):
    """A login role that may schedule; pg_cron shows it, as every role, only its own jobs."""
    role = sql.Identifier(name)
    with cluster.connect(CRON_DB) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA cron TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON cron.job TO {}").format(role))
        conn.execute(sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cron TO {}").format(role))
    try:
        yield name
    finally:
        with cluster.connect(CRON_DB) as conn:
            conn.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE username = %s", (name,))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
            conn.execute(sql.SQL("DROP ROLE {}").format(role))


def test_a_role_seeing_only_its_own_jobs_warns_that_it_may_duplicate_anothers(app):
    """The production fix lives in a job the superuser owns: the migration role cannot see
    it, so the job it creates runs beside it; that is said, not left silent."""
    config = config_for(app)
    converge(app, config)  # as the superuser: it sees every role's jobs
    name = f"{app.name}_publish"
    alter_command(app.cluster, name, "set statement_timeout = '6s'; select public.x()")
    with own_jobs_role(app.cluster, f"{app.name}_mig") as role:
        dsn = app.dsn_as(role)
        plan = converge_jobs(contextlib.nullcontext(dsn), config.declare(), cron_database=CRON_DB)[
            0
        ]
        assert job_in(plan, name).action is Action.CREATE
        assert plan.own_jobs_only == role
        assert (
            f"job {name}: no job of this name among role {role}'s own; pg_cron shows each role "
            "only its own jobs, so one of another role would run beside this one: check "
            "cron.job as a superuser"
        ) in plan.warnings
    superuser_run = converge(app, config, check_mode=True)
    assert superuser_run.own_jobs_only is None
    assert job_in(superuser_run, name).action is Action.DRIFT
    assert not [w for w in superuser_run.warnings if "own jobs" in w]
