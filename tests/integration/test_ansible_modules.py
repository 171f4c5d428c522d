"""`task_timeout` and `lease_guard` run by real ansible-playbook against a real host: sshd in
a network namespace, the backend as a podman container, PostgreSQL reachable only through
the SSH tunnel the action plugin opens with the host's own inventory settings.
"""

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from sandbox.queues import create_river
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.ansible_run import run_playbook, write_inventory

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOUR_AGO = datetime.now(UTC) - timedelta(hours=1)


@pytest.fixture
def runs(app_db):
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
    return app_db


@pytest.fixture
def playbook(tmp_path, app_host_pg, runs, backend):
    """Write a one-play playbook for host app1 and run it; returns the PlaybookRun."""
    host_vars = app_host_pg.ansible_host_vars()

    def run(tasks, *args, inventory_vars=None, env=None, **run_kwargs):
        inventory = write_inventory(
            tmp_path / "inventory.yml",
            {"app1": {**host_vars, **(inventory_vars or {})}},
            leaseguard_db_name=runs.name,
            leaseguard_db_user=GUARD_PW_ROLE,
        )
        path = tmp_path / "play.yml"
        play = {"hosts": "app", "gather_facts": False, "tasks": tasks}
        path.write_text(yaml.safe_dump([play], sort_keys=False))
        env = {"LEASEGUARD_DB_PASSWORD": GUARD_PW_PASSWORD, **(env or {})}
        return run_playbook(path, inventory, tmp_path, *args, env=env, **run_kwargs)

    return run


def guard_task(name="guard", **options):
    return {
        "name": name,
        "leaseguard.deploy.lease_guard": {
            "lookup": "{{ lookup }}",
            "db_name": "{{ leaseguard_db_name }}",
            "db_user": "{{ leaseguard_db_user }}",
            **options,
        },
        "register": name,
    }


LOOKUP = {"name": "lookup", "leaseguard.deploy.task_timeout": {}, "register": "lookup"}


def claim(runs, *rows):
    with runs.connect(socket=True) as conn:
        insert_runs(conn, rows)


def test_task_timeout_returns_the_one_variable_and_the_start_time(playbook, backend):
    run = playbook([LOOKUP])
    assert run.returncode == 0, run.stderr
    result = run.result("lookup", "app1")
    assert result["task_timeout_s"] == 3600.0
    assert result["source"] == "docker:backend/APP_TASK_TIMEOUT_S"
    started = datetime.fromisoformat(result["runtime_started_at"])
    assert started == datetime.fromisoformat(backend["State"]["StartedAt"][:26] + "+00:00")
    assert "PATH=" not in run.stdout  # the container's environment never leaves the plugin


def test_a_missing_variable_fails_the_lookup_with_a_message_naming_it(playbook):
    run = playbook(
        [{**LOOKUP, "leaseguard.deploy.task_timeout": {"task_timeout": {"variable": "NOPE_S"}}}]
    )
    assert run.returncode == 2
    result = run.result("lookup", "app1")
    assert result["failed"] is True
    assert "NOPE_S is not set" in result["msg"]


def test_a_live_claim_silent_for_ten_minutes_defers(playbook, runs):
    ten_min_ago = datetime.now(UTC) - timedelta(minutes=10)
    claim(runs, (1, "running", ten_min_ago, ten_min_ago), (2, "open", None, None))
    run = playbook([LOOKUP, guard_task(runtime_started_at=HOUR_AGO.isoformat())])
    assert run.returncode == 0, run.stderr
    verdict = run.result("guard", "app1")
    assert verdict["decision"] == "defer"
    assert verdict["counts"] == {"live": 1, "stale": 0, "orphaned": 0, "queued": 1}
    assert verdict["live"][0]["id"] == "1"
    assert 6500 < verdict["wait_upper_bound_s"] <= 6600
    assert verdict["task_timeout_source"] == "docker:backend/APP_TASK_TIMEOUT_S"
    assert verdict["changed"] is False


def test_only_orphaned_and_queued_rows_proceed(playbook, runs):
    ten_min_ago = datetime.now(UTC) - timedelta(minutes=10)
    claim(runs, (1, "running", ten_min_ago, ten_min_ago), (2, "open", None, None))
    run = playbook([LOOKUP, guard_task()])  # the container started seconds ago
    assert run.returncode == 0, run.stderr
    verdict = run.result("guard", "app1")
    assert verdict["decision"] == "proceed"
    assert verdict["counts"] == {"live": 0, "stale": 0, "orphaned": 1, "queued": 1}


def one_task_guard(name="guard", **options):
    """lease_guard with no lookup given: it looks the host up itself (the guard role's way)."""
    task = guard_task(name, **options)
    del task["leaseguard.deploy.lease_guard"]["lookup"]
    return task


def task_output(stdout, task_name):
    """What -vvv printed during the task named."""
    return stdout.split(f"TASK [{task_name}]", 1)[1].split("TASK [", 1)[0]


def exec_count(stdout, task_name):
    """Commands ansible ran over ssh during the task named (from -vvv output)."""
    return task_output(stdout, task_name).count("SSH: EXEC ")


LIVE_OR_ORPHANED = pytest.mark.parametrize(
    ("claimed_at", "decision", "counts"),
    [
        # Claimed after the container started (seconds ago), lease not expired: live.
        (None, "defer", {"live": 1, "stale": 0, "orphaned": 0, "queued": 1}),
        # Claimed before it started: the process that held it is gone.
        (timedelta(minutes=10), "proceed", {"live": 0, "stale": 0, "orphaned": 1, "queued": 1}),
    ],
)


@LIVE_OR_ORPHANED
def test_lease_guard_looks_up_in_one_exec_and_judges_as_after_task_timeout(
    playbook, runs, claimed_at, decision, counts
):
    at = datetime.now(UTC) - (claimed_at or timedelta(0))
    claim(runs, (1, "running", at, at), (2, "open", None, None))
    run = playbook([LOOKUP, guard_task("given"), one_task_guard("alone")], "-vvv")
    assert run.returncode == 0, run.stderr
    given, alone = run.result("given", "app1"), run.result("alone", "app1")
    for verdict in (given, alone):
        assert verdict["decision"] == decision
        assert verdict["counts"] == counts
    assert alone["task_timeout_source"] == given["task_timeout_source"]
    assert alone["lease_s"] == given["lease_s"]
    looked_up, lookup = alone["lookup"], run.result("lookup", "app1")
    for key in ("task_timeout_s", "source", "assumed", "runtime_started_at"):
        assert looked_up[key] == lookup[key], key
    assert set(looked_up["clock"]) == {"offset_s", "uncertainty_s"}
    # The lookups and the clock reading: one command each for the task and for lease_guard
    # on its own (the judgment given a lookup still reads the host's clock once).
    assert exec_count(run.stdout, "lookup") == 1
    assert exec_count(run.stdout, "alone") == 1
    assert exec_count(run.stdout, "given") == 1


def test_lease_guard_alone_fails_closed_on_a_failed_lookup_naming_it(playbook, runs):
    claim(runs, (1, "running", datetime.now(UTC), None))
    run = playbook([one_task_guard(task_timeout={"variable": "NOPE_S"})])
    assert run.returncode == 2
    result = run.result("guard", "app1")
    assert result["decision"] == "failed"
    assert result["error"]["type"] == "LookupFailed"
    assert "NOPE_S is not set" in result["msg"]
    assert "lookup" not in result


def test_fail_on_defer_fails_and_force_warns_with_the_claims(playbook, runs):
    claim(runs, (7, "running", datetime.now(UTC), None))
    run = playbook(
        [
            LOOKUP,
            {**guard_task("forced", force=True)},
            {**guard_task("strict", fail_on_defer=True)},
        ]
    )
    assert run.returncode == 2
    forced = run.result("forced", "app1")
    assert forced["forced"] is True
    assert any("FORCED on app1: 1 live claim(s) will be killed: 7" in w for w in forced["warnings"])
    assert run.result("strict", "app1")["failed"] is True


def test_an_unreachable_database_fails_closed_without_leaking_the_password(playbook):
    run = playbook([LOOKUP, guard_task(db_port=5999)])
    assert run.returncode == 2
    result = run.result("guard", "app1")
    assert result["decision"] == "failed"
    assert result["error"]["type"] in ("DatabaseUnavailable", "TunnelError")
    assert GUARD_PW_PASSWORD not in run.stdout + run.stderr


def test_check_mode_judges_without_waiting(playbook, runs):
    claim(runs, (3, "running", datetime.now(UTC), None))
    run = playbook([LOOKUP, guard_task(wait=True, deadline_s=60)], "--check")
    assert run.returncode == 0, run.stderr
    verdict = run.result("guard", "app1")
    assert verdict["decision"] == "defer"
    assert "drain" not in verdict


def test_a_changed_host_key_is_named_with_the_fix(playbook, app_host_pg, tmp_path):
    other = tmp_path / "known_hosts"
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIHvJ0Qy0bQ8o8e1Qw6Hb9r7a1q0fZq8R8m0o9x8mZ0aA"
    other.write_text(
        f"[{app_host_pg.addr}]:{app_host_pg.port} ssh-ed25519 {key}\n"
        f"{app_host_pg.addr} ssh-ed25519 {key}\n"
    )
    args = app_host_pg.ansible_host_vars()["ansible_ssh_common_args"]
    args = args.replace(str(app_host_pg.known_hosts_path), str(other))
    run = playbook([LOOKUP], inventory_vars={"ansible_ssh_common_args": args})
    assert run.returncode != 0
    result = run.result("lookup", "app1")
    assert "host key does not match known_hosts" in result["msg"], result["msg"]
    assert "ssh-keygen -R" in result["msg"]
    assert "running a command over its Ansible connection failed" not in result["msg"]


def test_lease_guard_takes_a_preset_and_options_override_it(playbook, runs):
    """River's stock schema: silent for 59 min defers by River's own 1 h rescue rule; with
    the task option's 30 min lease instead, the same job is stale and the play proceeds."""
    with runs.connect(socket=True) as conn:
        create_river(conn)
        conn.execute(
            "INSERT INTO river_job (state, attempted_at, kind, args, max_attempts) "
            "VALUES ('running', now() - interval '59 minutes', 'k', '{}', 25)"
        )
    # No registered lookup: the preset's own fixed 1 h is the lease.
    task = guard_task(preset="river", lookup={}, runtime_started_at=HOUR_AGO.isoformat())
    run = playbook([task])
    assert run.returncode == 0, run.result("guard", "app1")
    verdict = run.result("guard", "app1")
    assert (verdict["decision"], verdict["lease_s"], verdict["table"]) == (
        "defer",
        3600.0,
        "river_job",
    )
    overridden = guard_task(
        preset="river", lookup={}, runtime_started_at=HOUR_AGO.isoformat(), task_timeout_s=1800
    )
    run = playbook([overridden])
    assert run.returncode == 0, run.stderr
    verdict = run.result("guard", "app1")
    assert (verdict["decision"], verdict["counts"]["stale"]) == ("proceed", 1)


# --- one DSN means one database (no tunnel: the controller connects itself) --------------


def run_direct(db, tmp_path, **options):
    """lease_guard with tunnel: false on a `local` host; no lookups (facts are given)."""
    inventory = write_inventory(
        tmp_path / "inventory.yml", {"ctl": {"ansible_connection": "local"}}
    )
    task = {
        "name": "guard",
        "leaseguard.deploy.lease_guard": {
            "tunnel": False,
            "task_timeout_s": 3600,
            "runtime_started_at": HOUR_AGO.isoformat(),
            **options,
        },
        "register": "guard",
        "ignore_errors": True,
    }
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "tasks": [task]}]))
    run = run_playbook(path, inventory, tmp_path, env={"LEASEGUARD_DSN": ""})
    return run.result("guard", "ctl")


def test_tunnel_false_judges_the_database_the_dsn_names(db, tmp_path):
    with db.connect() as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", datetime.now(UTC), None)])
    assert db.cluster.port != 5432  # the old default would have judged another database
    verdict = run_direct(db, tmp_path, dsn=db.dsn)
    assert verdict.get("decision") == "defer", verdict.get("msg")
    assert verdict["counts"]["live"] == 1
    # The same address given as db_host/db_port beside a host-less DSN is the same database.
    host_less = f"dbname={db.name} user=postgres"
    verdict = run_direct(
        db, tmp_path, dsn=host_less, db_host=db.cluster.host, db_port=db.cluster.port
    )
    assert verdict.get("decision") == "defer", verdict.get("msg")


@pytest.mark.parametrize("bad", ["hunter2-not-a-number", "\uff13\uff16\uff10\uff10", "1_000"])
def test_a_bad_lookup_timeout_fails_naming_it_without_its_value(db, tmp_path, bad):
    """A registered lookup's task_timeout_s goes through the strict parser: ASCII digits only
    (never float()'s full-width digits or underscores), the value never in the result."""
    lookup = {"task_timeout_s": bad, "runtime_started_at": HOUR_AGO.isoformat()}
    verdict = run_direct(db, tmp_path, dsn=db.dsn, task_timeout_s=None, lookup=lookup)
    assert verdict.get("failed"), verdict
    assert "lookup.task_timeout_s" in verdict["msg"]
    assert bad not in str(verdict)
    with db.connect() as conn:
        create_runs_table(conn)
    lookup["task_timeout_s"] = "3600"  # the legitimate value still judges
    verdict = run_direct(db, tmp_path, dsn=db.dsn, task_timeout_s=None, lookup=lookup)
    assert (verdict.get("decision"), verdict.get("task_timeout_s")) == ("proceed", 3600.0)


def test_a_dsn_host_and_a_different_db_host_is_a_usage_error_naming_both(db, tmp_path):
    verdict = run_direct(db, tmp_path, dsn=db.dsn, db_host="db.example.internal")
    assert verdict["failed"] is True
    assert "dsn names host" in verdict["msg"]
    assert "db_host names db.example.internal" in verdict["msg"]
    assert verdict["error"]["type"] == "ConfigError"
    verdict = run_direct(db, tmp_path, dsn=db.dsn, db_port=db.cluster.port + 1)
    assert "dsn names port" in verdict["msg"] and "db_port" in verdict["msg"]


# --- through become: the tty merges stderr into stdout and ends lines with CRLF -----------

# The sandbox hosts log in as root and have no sudo; su from root needs no password
# (pam_rootok). Ansible skips become to the user it logged in as, unless told not to.
BECOME = {"become": True, "become_method": "su", "become_user": "root"}
SAME_USER = {"ANSIBLE_BECOME_ALLOW_SAME_USER": "true"}


def become(task):
    return {**task, **BECOME}


def assert_same_lookup(looked_up, lookup):
    """Become's lookup reads what a lookup without it read, and a clock as close to ours."""
    for key in ("task_timeout_s", "source", "assumed", "runtime_started_at"):
        assert looked_up[key] == lookup[key], key
    assert looked_up["task_timeout_s"] == 3600.0
    for clock in (looked_up["clock"], lookup["clock"]):
        # The host is this machine in a network namespace: one clock, so the offset read is
        # within the reading's own uncertainty of zero.
        assert set(clock) == {"offset_s", "uncertainty_s"}
        assert abs(clock["offset_s"]) <= clock["uncertainty_s"] + 0.001, clock


@LIVE_OR_ORPHANED
def test_through_become_the_lookups_read_the_same_and_judge_the_same(
    playbook, runs, claimed_at, decision, counts
):
    at = datetime.now(UTC) - (claimed_at or timedelta(0))
    claim(runs, (1, "running", at, at), (2, "open", None, None))
    tasks = [
        LOOKUP,
        become({**LOOKUP, "name": "root_lookup", "register": "root_lookup"}),
        become(guard_task("given", lookup="{{ root_lookup }}")),
        become(one_task_guard("alone")),
        # The guard role registers lease_guard's lookup; migrate and drain.yml judge the
        # fleet from it, which needs its clock reading.
        become(one_task_guard("fleet", fleet_lookups={"app1": "{{ alone.lookup }}"})),
    ]
    run = playbook(tasks, "-vvv", env=SAME_USER)
    assert run.returncode == 0, run.stdout[-3000:]
    lookup = run.result("lookup", "app1")
    assert_same_lookup(run.result("root_lookup", "app1"), lookup)
    given, alone = run.result("given", "app1"), run.result("alone", "app1")
    fleet = run.result("fleet", "app1")
    assert fleet.get("decision") == decision, fleet.get("msg")
    assert_same_lookup(alone["lookup"], lookup)
    for verdict in (given, alone, fleet):
        assert verdict["decision"] == decision
        assert verdict["counts"] == counts
    for verdict in (given, alone):
        assert verdict["task_timeout_source"] == lookup["source"]
    assert fleet["task_timeout_source"] == f"app1:{lookup['source']}"
    # Through become too, one inspect serves both facts and the clock is read in its exec:
    # one command, through su on a tty.
    for task_name in ("root_lookup", "alone"):
        section = task_output(run.stdout, task_name)
        assert section.count("SSH: EXEC ") == 1, task_name
        assert section.count(" -tt ") == 1, task_name
        assert section.count("Escalation succeeded") == 1, task_name


def test_through_become_a_missing_variable_fails_closed_naming_it(playbook, runs):
    claim(runs, (1, "running", datetime.now(UTC), None))
    missing = {"task_timeout": {"variable": "NOPE_S"}}
    lookup = become({**LOOKUP, "leaseguard.deploy.task_timeout": missing, "ignore_errors": True})
    no_container = {"task_timeout": {"container": "nope"}, "runtime": {"container": "nope"}}
    gone = become(
        {**LOOKUP, "name": "gone", "register": "gone", "ignore_errors": True}
        | {"leaseguard.deploy.task_timeout": no_container}
    )
    run = playbook([lookup, gone, become(one_task_guard(**missing))], env=SAME_USER)
    assert run.returncode == 2
    looked_up, verdict = run.result("lookup", "app1"), run.result("guard", "app1")
    assert looked_up["failed"] is True
    assert "NOPE_S is not set" in looked_up["msg"]
    # The engine's own words, as without become (not the tty's "Shared connection closed").
    said = run.result("gone", "app1")["msg"]
    assert "docker container nope: `docker inspect` exited 1: " in said
    assert "no such" in said.lower() and "Shared connection" not in said
    assert verdict["decision"] == "failed"
    assert verdict["error"]["type"] == "LookupFailed"
    assert "NOPE_S is not set" in verdict["msg"]


def test_through_become_a_value_read_as_a_line_is_not_corrupted(playbook, tmp_path):
    """Values read from a line of output: the tty's CRLF and a command's stderr (merged into
    stdout there) must not change them, as they do not without become."""
    env_file = tmp_path / "app.env"  # the sandbox host shares this machine's filesystem
    env_file.write_text('export APP_TASK_TIMEOUT_S="3600"\n')
    noisy = "echo warming up >&2; echo $APP_TASK_TIMEOUT_S; echo done >&2"
    sources = {
        "command": {"source": "command", "command": ["sh", "-c", noisy]},
        "env_file": {"source": "env_file", "path": str(env_file)},
    }
    tasks = []
    for name, spec in sources.items():
        lookup = {**LOOKUP, "leaseguard.deploy.task_timeout": {"task_timeout": spec}}
        tasks += [
            {**lookup, "name": name, "register": name},
            become({**lookup, "name": f"as_root_{name}", "register": f"as_root_{name}"}),
        ]
    run = playbook(tasks, env=SAME_USER)
    assert run.returncode == 0, run.stdout[-3000:]
    for name in sources:
        plain, as_root = run.result(name, "app1"), run.result(f"as_root_{name}", "app1")
        assert plain["task_timeout_s"] == as_root["task_timeout_s"] == 3600.0, name
        assert plain["source"] == as_root["source"], name


MISTYPED = {"leaseguard_on_bussy": "wait"}


def test_check_vars_in_the_task_refuses_a_mistyped_variable_before_any_lookup(playbook, runs):
    """The guard role's tasks check the names in the same task: nothing runs on the host."""
    claim(runs, (1, "open", None, None))
    looked_up = {**LOOKUP, "leaseguard.deploy.task_timeout": {"check_vars": True}}
    for task in (looked_up, one_task_guard(check_vars=True)):
        run = playbook([task], "-vvv", inventory_vars=MISTYPED)
        assert run.returncode == 2, run.stdout[-3000:]
        result = run.result(task["name"], "app1")
        assert result["unknown"] == {"leaseguard_on_bussy": "leaseguard_on_busy"}
        assert "leaseguard_on_bussy (did you mean leaseguard_on_busy?)" in result["msg"]
        assert exec_count(run.stdout, task["name"]) == 0  # no lookup, no tunnel, no verdict
        assert "counts" not in result and "task_timeout_s" not in result
    assert result["decision"] == "failed"  # the guard's refusal is a check that failed


def test_check_vars_in_the_task_lets_known_variables_through_and_is_off_by_default(playbook, runs):
    claim(runs, (1, "running", datetime.now(UTC), None))
    checked = one_task_guard("checked", check_vars=True)
    run = playbook([checked], inventory_vars={"leaseguard_on_busy": "defer"})
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.result("checked", "app1")["decision"] == "defer"
    # Off unless asked: a task of the user's own sees its own leaseguard_* names untouched.
    run = playbook([one_task_guard("unchecked")], inventory_vars=MISTYPED)
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.result("unchecked", "app1")["decision"] == "defer"


def role_vars_guard(name, **options):
    """lease_guard as the guard role runs it: options from the role's variables."""
    return {"name": name, "leaseguard.deploy.lease_guard": {"from_role_vars": True, **options}}


def test_from_role_vars_reads_the_roles_variables_and_task_options_win(playbook, runs):
    claim(runs, (1, "running", datetime.now(UTC), None))
    # The database's name and user come from the inventory's leaseguard_db_name/_user only.
    run = playbook([role_vars_guard("filled")])
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.result("filled", "app1")["decision"] == "defer"
    # A variable is read: a table that does not exist fails closed, naming it ...
    run = playbook([role_vars_guard("wrong table")], inventory_vars={"leaseguard_table": "nope"})
    assert run.returncode == 2
    failed = run.result("wrong table", "app1")
    assert failed["decision"] == "failed" and "nope" in failed["msg"]
    # ... unless the task sets the option itself.
    task = role_vars_guard("task wins", table="execution_runs")
    run = playbook([task], inventory_vars={"leaseguard_table": "nope"})
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.result("task wins", "app1")["decision"] == "defer"


def test_without_from_role_vars_the_roles_variables_are_not_read(playbook, runs):
    claim(runs, (1, "running", datetime.now(UTC), None))
    run = playbook(
        [{"name": "plain", "leaseguard.deploy.lease_guard": {}}],
        inventory_vars={"leaseguard_table": "nope"},
    )
    # No database name given at all: the check fails closed (never the variables' table).
    assert run.returncode == 2
    result = run.result("plain", "app1")
    assert result["decision"] == "failed" and "nope" not in result["msg"]
