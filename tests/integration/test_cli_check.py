"""`leaseguard check` as a user runs it: flags, config file, env, exit statuses, JSON."""

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.support.leaseguard_cli import leaseguard
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RUNTIME_AGE = timedelta(hours=3)


def started_at():
    """The runtime started 3 hours before this moment: computed per call, not at import, so
    "181 minutes ago" stays just before the start however long the suite has run."""
    return (datetime.now(UTC) - RUNTIME_AGE).replace(microsecond=0).isoformat()


class Facts:
    def __iter__(self):
        return iter(["--task-timeout-s", "3600", "--runtime-started-at", started_at()])


FACTS = Facts()


@pytest.fixture
def runs(db):
    with db.connect() as conn:
        create_runs_table(conn)
    return db


def add(db, *rows):
    """rows: (id, status, claimed_at age, updated_at age); ages are SQL intervals or None."""
    with db.connect() as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO execution_runs (id, status, claimed_at, updated_at) "
            "VALUES (%s, %s, now() - %s::interval, now() - %s::interval)",
            rows,
        )


def counts(live=0, stale=0, orphaned=0, queued=0):
    return {"live": live, "stale": stale, "orphaned": orphaned, "queued": queued}


RULES = {
    "silent-30-min-defers": ((1, "running", "30 min", "30 min"), 75, counts(live=1)),
    "past-lease-proceeds": ((1, "running", "2 hours 1 minute", "0"), 0, counts(stale=1)),
    "orphan-proceeds": ((1, "running", "181 minutes", "0"), 0, counts(orphaned=1)),
    "open-proceeds": ((1, "open", None, "0"), 0, counts(queued=1)),
    "fresh-claim-old-activity-defers": ((1, "running", "1 min", "5 hours"), 75, counts(live=1)),
    "just-inside-lease-defers": ((1, "running", "119 minutes", "119 minutes"), 75, counts(live=1)),
}


@pytest.mark.parametrize(("row", "exit_status", "counts"), RULES.values(), ids=RULES)
def test_every_rule_of_the_table_through_the_cli(runs, row, exit_status, counts):
    add(runs, row)
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS, "--json")
    assert done.returncode == exit_status, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["counts"] == counts
    assert verdict["decision"] == ("defer" if exit_status == 75 else "proceed")


# Builtins the predicate calls, shadowed by a schema the database's search_path names before
# pg_catalog (as a test suite's clock mock does): a day ahead, or every timestamp "earlier".
SHADOWS = {
    "now-a-day-ahead": "CREATE FUNCTION shadow.now() RETURNS timestamptz LANGUAGE sql "
    "AS $$ SELECT pg_catalog.now() + interval '1 day' $$",
    "timestamp-less-than": "CREATE FUNCTION shadow.lt(timestamptz, timestamptz) RETURNS boolean "
    "LANGUAGE sql AS $$ SELECT true $$; CREATE OPERATOR shadow.< "
    "(FUNCTION = shadow.lt, LEFTARG = timestamptz, RIGHTARG = timestamptz)",
}


@pytest.mark.parametrize("shadow", SHADOWS.values(), ids=SHADOWS)
@pytest.mark.parametrize(
    ("row", "exit_status", "counts"),
    [RULES["silent-30-min-defers"], RULES["past-lease-proceeds"]],
    ids=["live-defers", "stale-proceeds"],
)
def test_builtins_shadowed_on_the_search_path_do_not_change_the_judgment(
    runs, shadow, row, exit_status, counts
):
    add(runs, row)
    with runs.connect() as conn:
        conn.execute("CREATE SCHEMA shadow")
        conn.execute(shadow)
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET search_path = shadow, pg_catalog, public").format(
                sql.Identifier(runs.name)
            )
        )
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS, "--json")
    assert done.returncode == exit_status, done.stderr
    assert json.loads(done.stdout)["counts"] == counts


@pytest.mark.parametrize(
    ("row", "exit_status", "counts"),
    [RULES["silent-30-min-defers"], RULES["past-lease-proceeds"]],
    ids=["live-defers", "stale-proceeds"],
)
def test_a_database_with_its_own_date_and_interval_styles_is_judged(runs, row, exit_status, counts):
    """DateStyle 'SQL, DMY' (06/12/2026 ...) is not a style psycopg reads: the guard's
    transaction reads its times in ISO, whatever the database or role sets."""
    add(runs, row)
    with runs.connect() as conn:
        for setting in ("DateStyle = 'SQL, DMY'", "IntervalStyle = 'sql_standard'"):
            query = sql.SQL("ALTER DATABASE {} SET " + setting).format(sql.Identifier(runs.name))
            conn.execute(query)
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS, "--json")
    assert done.returncode == exit_status, done.stderr
    assert json.loads(done.stdout)["counts"] == counts


@pytest.mark.parametrize("timeout_s", ["1e12", "1e15"])
@pytest.mark.parametrize(
    ("row", "exit_status", "counts"),
    [RULES["silent-30-min-defers"], RULES["orphan-proceeds"]],
    ids=["live-defers", "orphan-proceeds"],
)
def test_a_task_timeout_of_thousands_of_years_is_judged(runs, timeout_s, row, exit_status, counts):
    """An app's "no timeout" spelt as a huge number: the live claim defers, an orphan of the
    runtime's start still proceeds (it failed the query, or raised OverflowError)."""
    add(runs, row)
    done = leaseguard(
        "check", "--dsn", runs.dsn, "--task-timeout-s", timeout_s,
        "--runtime-started-at", started_at(), "--json",
    )  # fmt: skip
    assert done.returncode == exit_status, done.stderr
    assert json.loads(done.stdout)["counts"] == counts


@pytest.mark.parametrize("ahead", [timedelta(hours=1), None], ids=["future", "past"])
def test_a_runtime_start_after_the_database_clock_fails_closed(runs, ahead):
    """A start in the future (a host clock stepped back since) would class the live claim
    below orphaned and proceed; a start in the past still judges it so."""
    add(runs, (1, "running", "5 min", "0"))
    now = datetime.now(UTC).replace(microsecond=0)
    start = now + ahead if ahead else now - timedelta(minutes=10)
    facts = ["--task-timeout-s", "3600", "--runtime-started-at", start.isoformat()]
    done = leaseguard("check", "--dsn", runs.dsn, *facts, "--json")
    verdict = json.loads(done.stdout)
    if ahead is None:
        assert (done.returncode, verdict["counts"]) == (75, counts(live=1)), done.stderr
        return
    assert (done.returncode, verdict["decision"]) == (1, "failed"), done.stdout
    assert "start time" in verdict["error"]["message"]
    assert "after the database's clock" in done.stderr and "Traceback" not in done.stderr


def test_json_shape_of_a_deferral(runs):
    add(runs, (42, "running", "30 min", None), (7, "open", None, None))
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS, "--json")
    verdict = json.loads(done.stdout)
    assert set(verdict) >= {
        *("decision", "lease_s", "task_timeout_s", "task_timeout_source", "runtime_started_at"),
        *("checked_at", "counts", "live", "wait_upper_bound_s"),
    }
    assert verdict["lease_s"] == 7200.0
    assert verdict["task_timeout_s"] == 3600.0
    assert verdict["live"][0]["id"] == "42"
    assert set(verdict["live"][0]) == {
        *("id", "claimed_at", "lease_expires_at", "remaining_s"),
        *("never_expires", "expiry_null"),
    }
    assert 5390 < verdict["wait_upper_bound_s"] <= 5400
    started = datetime.fromisoformat(verdict["runtime_started_at"])
    assert abs((datetime.now(UTC) - RUNTIME_AGE - started).total_seconds()) < 60


def test_the_timeline_line_without_json(runs):
    add(runs, (1, "running", "30 min", None), (2, "open", None, None))
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS)
    assert done.returncode == 75
    line = done.stdout.strip()
    assert "\n" not in line
    assert " leaseguard host=" in line
    assert "decision=defer live=1 stale=0 orphaned=0 queued=1 lease_s=7200" in line


def test_dsn_from_leaseguard_dsn_and_contract_from_a_config_file(runs, tmp_path):
    add(runs, (1, "busy", "30 min", None))
    config = tmp_path / "leaseguard.yaml"
    config.write_text("claimed_statuses: [busy]\nqueued_statuses: []\nruntime:\n  source: none\n")
    argv = ["check", "--config", str(config), "--task-timeout-s", "3600"]
    done = leaseguard(*argv, env={"LEASEGUARD_DSN": runs.dsn})
    assert done.returncode == 75, done.stderr


def test_libpq_environment_variables_are_honoured(runs):
    add(runs, (1, "running", "30 min", None))
    cluster = runs.cluster
    env = {
        "PGHOST": cluster.host,
        "PGPORT": str(cluster.port),
        "PGDATABASE": runs.name,
        "PGUSER": "postgres",
    }
    done = leaseguard("check", *FACTS, env=env)
    assert done.returncode == 75, done.stderr


def test_flags_override_the_config_file(runs, tmp_path):
    add(runs, (1, "running", "30 min", None))
    config = tmp_path / "c.yaml"
    config.write_text("leaseguard:\n  claimed_statuses: [busy]\n")
    done = leaseguard(
        "check", "--config", str(config), "--dsn", runs.dsn, *FACTS, "--claimed-status", "running"
    )
    assert done.returncode == 75


def test_a_shorter_multiplier_flag_changes_the_lease(runs):
    add(runs, (1, "running", "90 min", None))
    assert leaseguard("check", "--dsn", runs.dsn, *FACTS).returncode == 75
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS, "--lease-multiplier", "1")
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task-timeout-s", "abc"], "--task-timeout-s is not a number of seconds"),
        (["--task-timeout-s", "0"], "--task-timeout-s must be greater than 0 seconds"),
        (["--task-timeout-s", "nan"], "--task-timeout-s is not a number of seconds"),
        (
            ["--task-timeout-s", "60", "--runtime-started-at", "2026-01-01T00:00:00"],
            "--runtime-started-at needs a timezone",
        ),
        (["--task-timeout-s", "60", "--lease-multiplier", "0.5"], "lease.multiplier must be"),
        (["--config", "/nonexistent/leaseguard.yaml"], "cannot read config file"),
    ],
)
def test_usage_errors_exit_2_with_a_message(runs, args, message):
    done = leaseguard("check", "--dsn", runs.dsn, *args)
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"table: \xff\xfeexecution_runs\n", "is not UTF-8 text"),
        (b"table: execution_runs\ntable: jobs\n", "key 'table' is given twice (line 2)"),
        (b"lease:\n  multiplier: 2\n  multiplier: 1\n", "key 'multiplier' is given twice"),
    ],
    ids=["not-utf8", "duplicate-key", "duplicate-nested-key"],
)
def test_a_config_file_yaml_would_misread_is_a_usage_error(runs, tmp_path, content, message):
    """Not a traceback, and not the last of two values silently (PyYAML keeps the last)."""
    config = tmp_path / "c.yaml"
    config.write_bytes(content)
    done = leaseguard("check", "--config", str(config), "--dsn", runs.dsn, *FACTS)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_config_file_merge_key_still_overrides_what_it_merges(runs, tmp_path):
    add(runs, (1, "running", "90 min", None))
    config = tmp_path / "c.yaml"
    config.write_text("lease:\n  <<: {multiplier: 2}\n  multiplier: 1\n")
    done = leaseguard("check", "--config", str(config), "--dsn", runs.dsn, *FACTS)
    assert done.returncode == 0, done.stderr


def test_a_clock_skew_too_large_for_a_timestamp_fails_without_a_traceback(runs):
    add(runs, (1, "running", "5 min", "0"))
    done = leaseguard("check", "--dsn", runs.dsn, *FACTS, "--clock-skew-s", "1e15")
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "clock_skew_s (1e+15 s) reaches past year 1" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_table_fails_closed_with_exit_1_naming_it(db):
    done = leaseguard("check", "--dsn", db.dsn, *FACTS, "--table", "jobs", "--json")
    assert done.returncode == 1
    verdict = json.loads(done.stdout)
    assert verdict["decision"] == "failed"
    assert verdict["error"] == {
        "type": "SchemaMismatch",
        "message": "table jobs does not exist (or is not visible)",
    }


def test_an_unreachable_database_fails_closed_without_leaking_the_dsn(db):
    secret = "s3cret-pw-DO-NOT-LEAK"
    dsn = f"postgresql://guard_pw:{secret}@127.0.0.1:1/{db.name}?connect_timeout=3"
    done = leaseguard("check", "--dsn", dsn, *FACTS)
    assert done.returncode == 1
    assert "decision=failed error=DatabaseUnavailable" in done.stdout
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/" in done.stderr
    assert "connection refused" in done.stderr
    for leak in (secret, "postgresql://", "guard_pw:"):
        assert leak not in done.stdout + done.stderr


@pytest.mark.parametrize("where", ["dsn", "PGDATABASE"])
def test_a_dbname_holding_a_connection_string_is_not_echoed(db, where):
    """libpq reads a dbname with '=' or a URI as a connection string, password and all."""
    secret = "s3cret-in-dbname"
    inner = f"postgresql://guard_pw:{secret}@127.0.0.1:1/{db.name}"
    dsn = f"host=127.0.0.1 port=1 connect_timeout=3 dbname={inner}" if where == "dsn" else ""
    env = {"PGHOST": "127.0.0.1", "PGPORT": "1", "PGDATABASE": inner} if not dsn else None
    done = leaseguard("check", *(["--dsn", dsn] if dsn else []), *FACTS, env=env)
    assert done.returncode == 1, done.stderr
    assert "at 127.0.0.1:1/a database named by a connection string" in done.stderr
    assert secret not in done.stdout + done.stderr


def test_a_wrong_password_fails_closed_without_leaking_it(db):
    dsn = db.dsn_as("guard_pw", password="hunter2-wrong")
    done = leaseguard("check", "--dsn", dsn, *FACTS, "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["type"] == "DatabaseUnavailable"
    assert "authentication failed" in done.stderr
    assert "hunter2-wrong" not in done.stdout + done.stderr


def test_an_unparsable_dsn_is_a_usage_error_that_does_not_echo_it():
    done = leaseguard("check", "--dsn", "host=x password='unterminated", *FACTS)
    assert done.returncode == 2
    assert "unterminated" not in done.stderr


def test_a_password_cut_by_a_space_is_not_named_as_an_unknown_keyword():
    """password=Tr0ub4dor horse=battery: libpq reads a keyword 'horse', part of the password."""
    dsn = "host=127.0.0.1 password=Tr0ub4dor horse=battery"
    done = leaseguard("check", "--dsn", dsn, *FACTS)
    assert done.returncode == 2
    assert "not valid after keyword 'password'" in done.stderr
    assert not {"Tr0ub4dor", "horse", "battery"} & set(done.stderr.replace("'", " ").split())


def test_help_explains_every_option():
    done = leaseguard("check", "--help")
    assert done.returncode == 0
    for option in (
        *("--config", "--dsn", "--table", "--status-column", "--claimed-status", "--json"),
        *("--queued-status", "--id-column", "--claimed-at-column", "--lease-multiplier"),
        *("--lease-expires-column", "--task-timeout-s", "--runtime-started-at", "--clock-skew-s"),
    ):
        assert option in done.stdout
    top = leaseguard("--help")
    assert "check" in top.stdout and "75" in top.stdout


@pytest.mark.parametrize("as_json", [False, True], ids=["timeline", "json"])
def test_ctrl_c_during_a_check_fails_closed_without_a_traceback(runs, tmp_path, as_json):
    """A check blocked on the table's lock, interrupted: exit 1 (failed), never 130 and a
    Python traceback; with --json the failure JSON every other failure prints."""
    config = tmp_path / "leaseguard.yaml"
    config.write_text("lock_timeout_ms: 60000\nstatement_timeout_ms: 60000\n")
    argv = ["check", "--config", str(config), "--dsn", runs.dsn, *FACTS]
    with runs.connect() as holder, runs.connect() as watcher, holder.transaction():
        holder.execute("LOCK TABLE execution_runs IN ACCESS EXCLUSIVE MODE")
        proc = subprocess.Popen(
            [sys.executable, "-m", "leaseguard", *argv, *(["--json"] if as_json else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        try:
            waiting = (
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            assert wait_until(lambda: watcher.execute(waiting).fetchone()[0] > 0)
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert "leaseguard: interrupted" in stderr
    if as_json:
        failure = json.loads(stdout)
        assert failure["decision"] == "failed"
