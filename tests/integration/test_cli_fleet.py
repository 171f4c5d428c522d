"""`leaseguard check` judging a fleet for CI: every host's facts, one judgment, real PostgreSQL."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from sandbox.runs_table import create_runs_table
from tests.integration.test_cli_check import add, leaseguard

pytestmark = pytest.mark.integration


@pytest.fixture
def runs(db):
    with db.connect() as conn:
        create_runs_table(conn)
    return db


def ago(seconds):
    return (datetime.now(UTC) - timedelta(seconds=seconds)).replace(microsecond=0).isoformat()


def host_facts(name, timeout_s, started_ago_s):
    return ["--host-facts", f"{name}={timeout_s},{ago(started_ago_s)}"]


DAY = 86400

# (hosts: name -> (timeout, started ago), claim age, exit status, lease from, cut-off from)
CASES = {
    "restart-on-one-host-defers": ({"app1": (3600, 600), "app2": (3600, DAY)}, "1 hour", 75),
    "older-than-every-start-proceeds": (
        {"app1": (3600, 600), "app2": (3600, 3600)},
        "90 minutes",
        0,
    ),
    "short-timeout-on-one-host-defers": ({"app1": (60, DAY), "app2": (3600, DAY)}, "10 min", 75),
    "past-every-lease-proceeds": ({"app1": (60, DAY), "app2": (3600, DAY)}, "121 minutes", 0),
}


@pytest.mark.parametrize(("hosts", "claim_age", "exit_status"), CASES.values(), ids=CASES.keys())
def test_host_facts_are_judged_with_the_fleet_rule_in_any_order(
    runs, hosts, claim_age, exit_status
):
    add(runs, (1, "running", claim_age, None))
    verdicts = []
    for order in (list(hosts.items()), list(reversed(hosts.items()))):
        flags = [flag for name, facts in order for flag in host_facts(name, *facts)]
        done = leaseguard("check", "--dsn", runs.dsn, *flags, "--json")
        assert done.returncode == exit_status, done.stdout + done.stderr
        verdicts.append(json.loads(done.stdout))
    first, second = verdicts
    assert first["fleet"] == second["fleet"]
    assert first["counts"] == second["counts"]
    lease_from = max(sorted(hosts), key=lambda h: hosts[h][0])
    cutoff_from = max(sorted(hosts), key=lambda h: hosts[h][1])
    assert first["fleet"] == {
        "hosts": ["app1", "app2"],
        "lease_from": lease_from,
        "orphan_cutoff_from": cutoff_from,
    }
    assert first["lease_s"] == 2 * hosts[lease_from][0]
    assert first["task_timeout_source"] == f"{lease_from}:given:task_timeout_s"


def test_a_facts_file_and_the_timeline_name_the_fleet(runs, tmp_path):
    add(runs, (1, "running", "1 hour", None))
    facts = tmp_path / "facts.yml"
    # The shape of registered leaseguard.deploy.task_timeout results, extra keys included.
    facts.write_text(
        f"app2: {{task_timeout_s: 3600, runtime_started_at: '{ago(DAY)}', source: fixed, "
        "assumed: false, warnings: [], changed: false}\n"
        f"app1: {{task_timeout_s: 3600, runtime_started_at: {ago(600)}}}\n"
    )
    done = leaseguard("check", "--dsn", runs.dsn, "--facts-file", str(facts))
    assert done.returncode == 75, done.stderr
    assert "decision=defer" in done.stdout
    assert "fleet=app1,app2 lease_from=app1 cutoff_from=app2" in done.stdout


def test_a_failed_lookup_in_the_facts_file_fails_the_check_naming_the_host(runs, tmp_path):
    add(runs, (1, "running", "3 hours", None))
    facts = tmp_path / "facts.json"
    facts.write_text(
        json.dumps(
            {
                "app1": {"task_timeout_s": 3600, "runtime_started_at": ago(DAY)},
                "app2": {"failed": True, "error": {"message": "host app2: variable X is not set"}},
            }
        )
    )
    done = leaseguard("check", "--dsn", runs.dsn, "--facts-file", str(facts), "--json")
    assert done.returncode == 1
    verdict = json.loads(done.stdout)
    assert verdict["decision"] == "failed"
    assert (
        "host app2: its lookup failed (host app2: variable X is not set)"
        in (verdict["error"]["message"])
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host-facts", "app1"], "--host-facts needs HOST=TIMEOUT_S[,STARTED_AT]"),
        (["--host-facts", "app1=abc"], "host app1: task_timeout_s is not a number of seconds"),
        (
            ["--host-facts", "app1=60,2026-01-01T00:00:00"],
            "host app1: runtime_started_at has no timezone",
        ),
        (
            ["--host-facts", "app1=60", "--host-facts", "app1=120"],
            "host app1 is given more than once",
        ),
        (
            ["--host-facts", "app1=60", "--host-facts", "app2="],
            "no task timeout is known for host(s) app2",
        ),
        (
            ["--host-facts", "app1=60", "--task-timeout-s", "60"],
            "--task-timeout-s/--runtime-started-at describe one host",
        ),
        (["--facts-file", "/nonexistent/facts.yml"], "cannot read facts file"),
    ],
)
def test_fleet_usage_errors_exit_2_with_a_message(runs, args, message):
    done = leaseguard("check", "--dsn", runs.dsn, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr


def test_an_unknown_key_in_the_facts_file_is_a_usage_error(runs, tmp_path):
    facts = tmp_path / "facts.yml"
    facts.write_text("app1: {task_timeout: 3600}\n")
    done = leaseguard("check", "--dsn", runs.dsn, "--facts-file", str(facts))
    assert done.returncode == 2
    assert "host app1: unknown key(s) task_timeout" in done.stderr
