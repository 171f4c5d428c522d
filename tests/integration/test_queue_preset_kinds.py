"""River's per-kind timeouts and pg-boss's `index-sql`, against the stock schemas of
sandbox/queues, both directions at the boundaries.

River (job_rescuer.go makeRetryDecision): a kind whose worker's Timeout() is T > 0 is rescued
once max(RescueStuckJobsAfter, T) has passed since attempted_at; -1 (`unlimited`) never is.
"""

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import ConfigError
from leaseguard.core.verdict import Decision
from leaseguard.fabric.tasks import settings_from_config
from leaseguard.orchestration.session import local_session
from sandbox.queues import create_pg_boss, create_river
from sandbox.subprocess_env import clean_env
from tests.support.ansible_run import run_playbook, write_inventory

pytestmark = pytest.mark.integration

RESTART = timedelta(hours=6)
KINDS = {"report": 3 * 3600, "sync": "unlimited", "ping": 600}


def judge(dsn, started_ago=RESTART, **keys):
    contract = contract_from_mapping({"preset": "river", **keys})
    started = datetime.now(UTC) - started_ago
    with local_session(contract, dsn, runtime_started_at=started) as session:
        return session.judge()


@pytest.fixture
def river(db):
    with db.connect() as conn:
        create_river(conn)
    return db


def running(db, kind, attempted_ago, metadata="{}"):
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO river_job (state, attempted_at, kind, max_attempts, args, metadata) "
            "VALUES ('running', now() - %s::interval, %s, 25, '{}', %s)",
            (attempted_ago, kind, metadata),
        )


def test_a_kind_with_its_own_3_hour_timeout_running_2_hours_defers(river):
    """The client-wide lease (1 h) alone would call it stale: the issue's proceed."""
    running(river, "report", timedelta(hours=2))
    assert judge(river.dsn).decision is Decision.PROCEED  # without kind_timeouts
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert verdict.decision is Decision.DEFER
    assert 59 * 60 < verdict.wait_upper_bound_s <= 60 * 60


def test_a_kind_past_its_own_timeout_proceeds_just_before_defers(river):
    running(river, "report", timedelta(hours=3, minutes=1))
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    running(river, "report", timedelta(hours=2, minutes=58))
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)


def test_an_unlimited_kind_is_never_stale_but_an_orphan_of_a_restart_proceeds(river):
    running(river, "sync", timedelta(hours=5))
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.live) == (Decision.DEFER, 1)
    assert verdict.live[0].lease_expires_at is None  # no expiry: River never rescues it
    assert verdict.wait_upper_bound_s == 3600.0  # a drain waits one lease, then not drained
    verdict = judge(river.dsn, started_ago=timedelta(hours=4), kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.orphaned) == (Decision.PROCEED, 1)


def test_minus_one_is_river_s_own_spelling_of_unlimited(river):
    running(river, "sync", timedelta(hours=30))
    verdict = judge(river.dsn, started_ago=timedelta(days=2), kind_timeouts={"sync": -1})
    assert verdict.decision is Decision.DEFER


def test_a_timeout_shorter_than_the_rescue_horizon_still_waits_for_the_horizon(river):
    """The rescuer only looks at jobs older than RescueStuckJobsAfter: max(T, 1 h)."""
    running(river, "ping", timedelta(minutes=50))
    assert judge(river.dsn, kind_timeouts=KINDS).decision is Decision.DEFER
    running(river, "ping", timedelta(minutes=61))
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.counts.live, verdict.counts.stale) == (1, 1)


CANCELLED = '{"cancel_attempted_at": "2026-12-06T05:00:00Z"}'


@pytest.mark.parametrize("kind", ["sync", "report"])
def test_a_job_whose_cancel_was_attempted_takes_the_lease_whatever_its_kind(river, kind):
    """runOnce cancels a stuck job with metadata cancel_attempted_at before it asks the kind's
    Timeout(): past RescueStuckJobsAfter it is cancelled, even an unlimited kind's."""
    running(river, kind, timedelta(minutes=61), CANCELLED)
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    running(river, kind, timedelta(minutes=58), CANCELLED)
    running(river, kind, timedelta(hours=2), '{"cancel_attempted_at": null}')  # not attempted
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.live, verdict.counts.stale) == (Decision.DEFER, 2, 1)


def test_kinds_not_listed_keep_the_client_wide_lease(river):
    running(river, "other", timedelta(minutes=61))
    verdict = judge(river.dsn, kind_timeouts=KINDS)
    assert (verdict.decision, verdict.counts.stale) == (Decision.PROCEED, 1)
    running(river, "other", timedelta(minutes=58))
    assert judge(river.dsn, kind_timeouts=KINDS).decision is Decision.DEFER


def test_a_drain_s_polls_judge_the_kinds_alike(river):
    """A drain's session judges poll after poll on one connection."""
    running(river, "report", timedelta(hours=2))
    running(river, "sync", timedelta(hours=4))
    running(river, "other", timedelta(hours=2))
    contract = contract_from_mapping({"preset": "river", "kind_timeouts": KINDS})
    started = datetime.now(UTC) - RESTART
    with local_session(contract, river.dsn, runtime_started_at=started) as session:
        polls = [session.judge() for _ in range(3)]
    assert {(v.counts.live, v.counts.stale) for v in polls} == {(2, 1)}


def test_fabric_config_takes_kind_timeouts():
    settings = settings_from_config(
        {"leaseguard": {"preset": "river", "kind_timeouts": {"sync": "unlimited", "r": 60}}}
    )
    assert dict(settings.contract.kind_timeouts) == {"r": 60.0, "sync": None}


def test_a_kind_name_is_a_bound_value_never_sql(river):
    odd = "it's\"; DROP TABLE river_job; --"
    running(river, odd, timedelta(hours=2))
    verdict = judge(river.dsn, kind_timeouts={odd: 3 * 3600})
    assert verdict.decision is Decision.DEFER


def test_kind_timeouts_from_a_yaml_file_with_the_cli(river, tmp_path):
    running(river, "sync", timedelta(hours=2))
    config = tmp_path / "leaseguard.yaml"
    config.write_text("preset: river\nkind_timeouts:\n  sync: unlimited\n")
    started = (datetime.now(UTC) - RESTART).isoformat()
    common = ["--dsn", river.dsn, "--runtime-started-at", started, "--task-timeout-s", "3600"]
    done = run_cli("check", "--config", str(config), *common)
    assert done.returncode == 75, done.stdout + done.stderr
    assert run_cli("check", "--preset", "river", *common).returncode == 0


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"kind_timeouts": {"k": 0}}, "kind_timeouts.k"),
        ({"kind_timeouts": {"k": "forever"}}, "kind_timeouts.k"),
        ({"kind_timeouts": {"k": "\uff13\uff16\uff10\uff10"}}, "kind_timeouts.k"),
        ({"kind_timeouts": {"k": True}}, "kind_timeouts.k"),
        ({"kind_timeouts": ["k"]}, "kind_timeouts"),
        ({"preset": "oban", "kind_timeouts": {"k": 60}}, "river"),
    ],
)
def test_a_bad_kind_timeout_is_a_usage_error_naming_it(keys, named):
    with pytest.raises(ConfigError, match=named):
        contract_from_mapping({"preset": "river", **keys})


# --- pg-boss: never CONCURRENTLY on its partitioned table ----------------------------------


def run_cli(*argv):
    return subprocess.run(
        [sys.executable, "-m", "leaseguard", *argv],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )


def test_pg_boss_index_sql_offline_prints_no_concurrently_statement():
    done = run_cli("index-sql", "--preset", "pg-boss")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(line.startswith("-- ") for line in lines)  # no statement at all
    assert "--dsn" in done.stdout and "partitioned" in done.stdout


def test_pg_boss_index_sql_online_builds_concurrently_only_on_leaf_partitions(db):
    with db.connect() as conn:
        create_pg_boss(conn, ("q1", "q2"))
        partitioned = {
            name
            for (name,) in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relkind = 'p'"
            )
        }
    done = run_cli("index-sql", "--preset", "pg-boss", "--dsn", db.dsn)
    assert done.returncode == 0, done.stderr
    statements = [s for s in done.stdout.splitlines() if not s.startswith("--")]
    concurrent = [s for s in statements if "CONCURRENTLY" in s]
    assert concurrent and not any("ON ONLY" in s for s in concurrent)
    for statement in concurrent:
        target = statement.split(" ON ", 1)[1].split(" (", 1)[0].replace('"', "")
        assert target not in partitioned, statement
    for statement in done.stdout.splitlines():  # PostgreSQL takes every statement
        if not statement.startswith("--"):
            db.psql(statement)


def test_a_plain_river_table_still_gets_its_concurrent_index_offline():
    done = run_cli("index-sql", "--preset", "river", "--table", "jobs")
    assert 'CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_leaseguard_status"' in done.stdout


# --- Ansible: leaseguard_kind_timeouts / the module's kind_timeouts --------------------------


@pytest.mark.slow
def test_lease_guard_takes_kind_timeouts(river, tmp_path):
    """A real ansible-playbook, connected directly (tunnel: false): a 2 h old job of an
    unlimited kind defers; without the option River's 1 h lease calls it stale."""
    running(river, "sync", timedelta(hours=2))
    inventory = write_inventory(
        tmp_path / "inventory.yml", {"ctl": {"ansible_connection": "local"}}
    )

    def guard(**options):
        task = {
            "name": "guard",
            "leaseguard.deploy.lease_guard": {
                "tunnel": False,
                "dsn": river.dsn,
                "preset": "river",
                "lookup": {},
                "runtime_started_at": (datetime.now(UTC) - RESTART).isoformat(),
                **options,
            },
            "register": "guard",
            "ignore_errors": True,
        }
        path = tmp_path / "play.yml"
        path.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "tasks": [task]}]))
        return run_playbook(path, inventory, tmp_path, env={"LEASEGUARD_DSN": ""}).result(
            "guard", "ctl"
        )

    verdict = guard(kind_timeouts={"sync": "unlimited"})
    assert verdict.get("decision") == "defer", verdict.get("msg")
    verdict = guard()
    assert (verdict.get("decision"), verdict["counts"]["stale"]) == ("proceed", 1)
