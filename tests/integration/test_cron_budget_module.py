"""`cron_budget` run by real ansible-playbook against a real host: PostgreSQL 15 with pg_cron
(cron.job in database `postgres`), reachable only through the SSH tunnel the action plugin
opens with the host's own inventory settings. What is Ansible's own is tested here: the
options reaching the core, check mode, diff, warnings, the failure result and its message,
no secret in the output; cron.job's contents under each decision are the core's
(tests/integration/test_budgets_pg.py), cross-checked with psql here only where a task
option (check mode, active) decides them.

The jobs run in each test's own database and are named after it (`t_<hex>_claim`, ...), so
tests never see each other's jobs; they are unscheduled at the end of each test.
"""

import re
import sys

import pytest
import yaml

from leaseguard.adapters.pauses import hold_jobs
from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from tests.support.ansible_run import run_playbook, write_inventory
from tests.support.busy_intake import active, cron_conn, intake_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CRON_DB = "postgres"
STEPS = ("claim", "compute", "publish")
DEFAULTS = {"claim": "3s", "compute": "60s", "publish": "3s"}


def jobs_for(prefix, **budgets):
    """The claim / compute / publish jobs of the brief, named `<prefix>_<step>`."""
    return {
        f"{prefix}_{step}": {
            "schedule": "* * * * *",
            "function": f"public.{step}_stats_projection_job_v1",
            "budget": budgets.get(step, DEFAULTS[step]),
        }
        for step in STEPS
    }


def command(budget, step):
    """The command the template renders for `step` with `budget`."""
    function = f'"public"."{step}_stats_projection_job_v1"'
    return f"set statement_timeout = '{budget}'; select {function}();"


def cron_jobs(cluster, prefix):
    """{jobname: (command, database, active)} read back through psql (not the plugin)."""
    assert re.fullmatch(r"t_[0-9a-f]+", prefix)  # a fresh database's name: safe in a literal
    query = (
        "SELECT jobname, command, database, active FROM cron.job "  # noqa: S608
        f"WHERE jobname LIKE '{prefix}\\_%' ORDER BY jobname"
    )
    rows = [line.split("|") for line in cluster.psql(query, dbname=CRON_DB).splitlines() if line]
    return {name: (cmd, database, active) for name, cmd, database, active in rows}


def set_live_command(cluster, name, cmd):
    """A change made by hand in production, behind the deploy's back."""
    with cluster.connect(CRON_DB, socket=True) as conn:
        conn.execute(
            "SELECT cron.alter_job(jobid, command := %s) FROM cron.job WHERE jobname = %s",
            (cmd, name),
        )


@pytest.fixture
def app(app_db):
    """The test's database; its cron jobs (by name prefix) are unscheduled afterwards."""
    try:
        yield app_db
    finally:
        with app_db.cluster.connect(CRON_DB, socket=True) as conn:
            conn.execute(
                "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s",
                (f"{app_db.name}\\_%",),
            )


@pytest.fixture
def playbook(tmp_path, app_host_pg, app):
    """Run a one-play playbook of `tasks` on host app1 (the database only via the tunnel)."""

    def run(tasks, *args):
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            {"app1": app_host_pg.ansible_host_vars()},
            leaseguard_db_name=app.name,
        )
        path = tmp_path / "play.yml"
        play = {"hosts": "app", "gather_facts": False, "tasks": tasks}
        path.write_text(yaml.safe_dump([play], sort_keys=False))
        return run_playbook(path, inventory, tmp_path, *args)

    return run


def budgets(name="budgets", *, ignore_errors=False, **options):
    """A cron_budget task writing as the superuser (trusted on the host's loopback)."""
    task = {
        "name": name,
        "leaseguard.deploy.cron_budget": {
            "db_name": "{{ leaseguard_db_name }}",
            "db_user": "postgres",
            "cron_database": CRON_DB,
            **options,
        },
        "register": name,
    }
    if ignore_errors:
        task["ignore_errors"] = True
    return task


def test_check_mode_writes_nothing_a_first_run_creates_and_a_second_changes_nothing(playbook, app):
    run = playbook([budgets("planned", jobs=jobs_for(app.name))], "--check", "--diff")
    assert run.returncode == 0, run.stdout[-3000:]
    result = run.result("planned", "app1")
    assert result["changed"] is True and result["applied"] is False
    assert result["msg"] == "3 to create"
    assert cron_jobs(app.cluster, app.name) == {}
    jobs = jobs_for(app.name)
    run = playbook([budgets("first", jobs=jobs), budgets("second", jobs=jobs)])
    assert run.returncode == 0, run.stdout[-3000:]
    first, second = run.result("first", "app1"), run.result("second", "app1")
    assert first["changed"] is True
    assert {job["state"] for job in first["jobs"]} == {"create"}
    assert first["msg"] == "3 created"
    assert second["changed"] is False
    assert {job["state"] for job in second["jobs"]} == {"unchanged"}
    assert run.stats["app1"]["changed"] == 1
    production = {"environment": "production", "overrides": {f"{app.name}_publish": "6s"}}
    run = playbook([budgets("planned", jobs=jobs_for(app.name), **production)], "--check")
    assert run.result("planned", "app1")["changed"] is True
    assert cron_jobs(app.cluster, app.name)[f"{app.name}_publish"][0] == command("3s", "publish")


def test_drift_fails_the_task_with_the_report_and_on_drift_apply_overwrites_it(playbook, app):
    name = f"{app.name}_publish"
    assert playbook([budgets(jobs=jobs_for(app.name))]).returncode == 0
    set_live_command(app.cluster, name, command("6s", "publish"))
    run = playbook([budgets("routine", jobs=jobs_for(app.name))])
    assert run.returncode == 2
    result = run.result("routine", "app1")
    assert (result["failed"], result["changed"], result["applied"]) == (True, False, False)
    assert result["msg"] == (
        f"leaseguard: cron_budget on app1 (no environment) left everything untouched: "
        f"job {name}: live=6s declared=3s (default). To go on: declare the live budget as an "
        "override for this environment (overrides, leaseguard_cron_budget_overrides) if it is "
        "deliberate, or converge deliberately with on_drift=apply."
    )
    assert result["drift"] == [
        {"job": name, "live": "6s", "declared": "3s", "source": "default", "applied": False}
    ]
    # Left untouched: the deliberate converge still finds live=6s.
    run = playbook([budgets("converge", jobs=jobs_for(app.name), on_drift="apply")], "--diff")
    assert run.returncode == 0, run.stdout[-3000:]
    result = run.result("converge", "app1")
    assert result["changed"] is True
    assert result["drift"][0]["applied"] is True
    assert any("lowering the live statement budget 6s -> 3s" in w for w in result["warnings"])
    assert result["diff"]["before"][name]["budget"] == "6s"
    assert result["diff"]["after"][name]["budget"] == "3s"
    assert '-        "budget": "6s",' in run.stdout
    assert '+        "budget": "3s",' in run.stdout


# Each reaches the core by another path of the task's options; every spelling the core
# refuses is tested in tests/unit/test_budgets.py.
HOSTILE = [
    ("semicolon", {"publish": {"function": "public.f;drop_table_x"}}, "contains ';'"),
    ("zero_int", {"publish": {"budget": 0}}, "0 would disable statement_timeout"),
    ("bad_override", {"override": "-3s"}, "overrides.production."),
]


def test_hostile_input_is_rejected_with_a_message_and_nothing_is_written(playbook, app):
    tasks = []
    for label, change, _ in HOSTILE:
        jobs = jobs_for(app.name)
        options = {}
        for step, fields in change.items():
            if step == "override":
                options = {
                    "environment": "production",
                    "overrides": {f"{app.name}_publish": fields},
                }
            else:
                jobs[f"{app.name}_{step}"] = {**jobs[f"{app.name}_{step}"], **fields}
        tasks.append(budgets(label, ignore_errors=True, jobs=jobs, **options))
    run = playbook(tasks)
    assert run.returncode == 0, run.stdout[-3000:]
    for label, _, expected in HOSTILE:
        result = run.result(label, "app1")
        assert result["failed"] is True, label
        assert result["error"]["type"] == "ConfigError", label
        assert expected in result["msg"], (label, result["msg"])
        assert f"{app.name}_publish" in result["msg"], label
    assert cron_jobs(app.cluster, app.name) == {}


def test_pause_and_resume_switch_only_the_jobs_they_name(playbook, app):
    claim, publish = f"{app.name}_claim", f"{app.name}_publish"
    tasks = [
        budgets(jobs=jobs_for(app.name)),
        budgets("pause", active={claim: False, f"{app.name}_missing": False}),
        budgets("pause_again", active={claim: False}),
    ]
    run = playbook(tasks)
    assert run.returncode == 0, run.stdout[-3000:]
    pause = run.result("pause", "app1")
    assert pause["changed"] is True and pause["paused"] == [claim]
    assert pause["missing"] == [f"{app.name}_missing"]
    assert any("does not exist" in w for w in pause["warnings"])
    assert run.result("pause_again", "app1")["changed"] is False
    assert run.result("pause_again", "app1")["paused"] == []
    live = cron_jobs(app.cluster, app.name)
    assert live[claim][2] == "f" and live[publish][2] == "t"
    run = playbook([budgets("resume", active={claim: True})], "--check")
    assert run.result("resume", "app1")["changed"] is True
    assert cron_jobs(app.cluster, app.name)[claim][2] == "f"
    run = playbook([budgets("resume", active={claim: True})])
    assert run.result("resume", "app1")["resumed"] == [claim]
    assert cron_jobs(app.cluster, app.name)[claim][2] == "t"


def test_the_read_only_guard_role_cannot_write_and_the_message_says_why(playbook, app):
    task = budgets("as_guard", jobs=jobs_for(app.name))
    task["leaseguard.deploy.cron_budget"].update(
        db_user=GUARD_PW_ROLE, db_password=GUARD_PW_PASSWORD
    )
    run = playbook([task])
    assert run.returncode == 2
    result = run.result("as_guard", "app1")
    assert result["failed"] is True
    assert "permission denied" in result["msg"]
    assert result["error"] == {
        "type": "DatabaseError",
        "message": f"writing pg_cron job {app.name}_claim in database {CRON_DB}: "
        "permission denied (InsufficientPrivilege, SQLSTATE 42501); grant the role EXECUTE "
        "on cron.schedule/alter_job/schedule_in_database; nothing was changed",
    }
    assert GUARD_PW_PASSWORD not in run.stdout + run.stderr


def test_a_refused_live_command_s_literals_reach_no_result_diff_or_output(playbook, app):
    """A hand-made command outside the grammar may pass a token: refused, never shown."""
    name = f"{app.name}_claim"
    assert playbook([budgets(jobs=jobs_for(app.name))]).returncode == 0
    set_live_command(app.cluster, name, "select public.notify('tok-S3CRET')")
    timeout = (
        "set statement_timeout = 'tok-S3CRET'; select public.compute_stats_projection_job_v1()"
    )
    set_live_command(app.cluster, f"{app.name}_compute", timeout)
    run = playbook([budgets("refused", jobs=jobs_for(app.name))], "--diff", "-v")
    assert run.returncode == 2
    result = run.result("refused", "app1")
    assert result["failed"] is True and result["applied"] is False
    assert "found a string literal" in result["msg"]
    assert "statement_timeout is set to a string literal that is not a budget" in result["msg"]
    claim = next(job for job in result["jobs"] if job["job"] == name)
    assert claim["state"] == "unparseable"
    assert claim["before"]["command"] == "(not shown: leaseguard does not understand this command)"
    assert "S3CRET" not in run.stdout + run.stderr
    assert cron_jobs(app.cluster, app.name)[name][0] == "select public.notify('tok-S3CRET')"


def test_check_mode_says_what_it_would_pause_and_resume_and_every_documented_return(db, tmp_path):
    """Check mode's messages say what the real run would do ("would pause", never "would
    paused"); resume_recorded returns `applied` and `msg` as RETURN says (always), and
    intake_hold's check mode its `events` (always). Local connection, the test database."""
    with intake_job(db) as job, cron_conn(db) as conn:
        hold_jobs(conn, [job], "drain pid 1 on here")
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            {"app1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
            leaseguard_db_name=db.name,
        )
        connection = {"db_host": db.cluster.host, "db_port": db.cluster.port}

        def run(*tasks, check=False):
            path = tmp_path / "play.yml"
            play = {"hosts": "app", "gather_facts": False, "tasks": list(tasks)}
            path.write_text(yaml.safe_dump([play]))
            done = run_playbook(path, inventory, tmp_path, *(["--check"] if check else []))
            assert done.returncode == 0, done.stdout[-3000:]
            return done

        held = {"name": "hold", "leaseguard.deploy.intake_hold": {"state": "held"}}
        checked = run(budgets("resume", resume_recorded=True, **connection), held, check=True)
        resume = checked.result("resume", "app1")
        assert resume["changed"] is True and resume["applied"] is False
        assert resume["msg"] == f"would resume {job}"
        assert not active(db, job)
        assert checked.result("hold", "app1")["events"] == []
        resume = run(budgets("resume", resume_recorded=True, **connection)).result("resume", "app1")
        assert resume["applied"] is True and resume["msg"] == f"resumed {job}"
        assert resume["resumed"] == [job] and active(db, job)
        pause = run(budgets("pause", active={job: False}, **connection), check=True)
        assert pause.result("pause", "app1")["msg"] == f"would pause {job}"
        assert active(db, job)
