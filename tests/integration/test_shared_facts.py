"""A fleet run reads one database's catalog facts once for every host that reaches it
(leaseguard.orchestration.shared_facts), and never lends them to another database or role.

Both directions: a second host of the same database reads no catalog (its judgment still
runs, in its own snapshot); a host whose database or role differs reads its own facts, so a
table that hides rows from it still fails closed, whichever host went first.
"""

import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from psycopg import sql

from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import SchemaMismatch
from leaseguard.core.verdict import Decision
from leaseguard.orchestration.session import POLL_MARGIN_S, local_session
from leaseguard.orchestration.shared_facts import WAIT_FOR_OTHER_HOST_S, SharedFacts
from sandbox.pgcluster import GUARD_RO_ROLE
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.fab_run import run_fab

pytestmark = pytest.mark.integration

# What only the catalog pre-flight, the plan advice and the leftover-pause look-up send.
CATALOG_READS = ("row_security_active", "pg_attribute", "EXPLAIN", "cron", "pg_enum")


def live_claim_table(conn, *, rls=False):
    now = datetime.now(UTC)
    create_runs_table(conn)
    insert_runs(conn, [(1, "running", now - timedelta(minutes=5), now)])
    if rls:
        conn.execute("ALTER TABLE execution_runs ENABLE ROW LEVEL SECURITY")


def judged(dsn, shared):
    """One host's judgment in a run sharing `shared`; its verdict and backend pid."""
    contract = contract_from_mapping({"runtime": {"source": "none"}})
    with local_session(contract, dsn, task_timeout_s=3600.0) as session:
        session.shared = shared
        verdict = session.judge()
        return verdict, session._conn.info.backend_pid


def statements_of(cluster, offset, pid):
    """The server log's entries of backend `pid` (an entry's SQL goes on over lines of its
    own, without the prefix) since `offset`."""
    with cluster.logfile.open(errors="replace") as log:
        log.seek(offset)
        entries = re.split(r"\n(?=\d{4}-\d\d-\d\d )", log.read())
    return "\n".join(entry for entry in entries if f"[{pid}]" in entry.split("\n", 1)[0])


@pytest.fixture
def logged_db(db):
    """`db` with every statement of its new sessions in the server log."""
    with db.connect() as conn:
        live_claim_table(conn)
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET log_statement = 'all'").format(sql.Identifier(db.name))
        )
    return db


def test_the_second_host_of_a_database_reads_no_catalog_and_still_judges(logged_db):
    shared = SharedFacts()
    offset = logged_db.cluster.logfile.stat().st_size
    first, first_pid = judged(logged_db.dsn, shared)
    second, second_pid = judged(logged_db.dsn, shared)
    assert first.decision is second.decision is Decision.DEFER
    assert second.counts == first.counts and second.warnings == first.warnings
    read_first = statements_of(logged_db.cluster, offset, first_pid)
    read_second = statements_of(logged_db.cluster, offset, second_pid)
    assert all(marker in read_first for marker in CATALOG_READS[:3]), read_first
    assert not [m for m in CATALOG_READS if m in read_second], read_second
    assert "checked_at" in read_second  # its own counts, in its own snapshot


def test_where_the_server_will_not_say_which_database_each_host_reads_its_own(logged_db):
    """A role denied pg_control_system() (as a managed service may deny it) is judged as
    ever; its hosts share nothing."""
    with logged_db.connect() as conn:
        conn.execute("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_control_system() FROM PUBLIC")
    shared = SharedFacts()
    offset = logged_db.cluster.logfile.stat().st_size
    verdicts = [judged(logged_db.dsn_as(GUARD_RO_ROLE), shared) for _ in range(2)]
    assert [v.decision for v, _ in verdicts] == [Decision.DEFER] * 2
    for _, pid in verdicts:
        read = statements_of(logged_db.cluster, offset, pid)
        assert "row_security_active" in read and "checked_at" in read, read


def test_a_role_rls_hides_rows_from_fails_closed_after_a_superuser_host_passed(db):
    """Same database, another role: the superuser sees every row, guard_ro none."""
    with db.connect() as conn:
        live_claim_table(conn, rls=True)
    shared = SharedFacts()
    assert judged(db.dsn, shared)[0].decision is Decision.DEFER
    with pytest.raises(SchemaMismatch, match="row-level security"):
        judged(db.dsn_as(GUARD_RO_ROLE), shared)


def test_facts_of_one_database_are_never_lent_to_another(pg_cluster, db):
    """Two databases of one server, the same role: the second's RLS is still found."""
    with db.connect() as conn:
        live_claim_table(conn)
    shared = SharedFacts()
    assert judged(db.dsn_as(GUARD_RO_ROLE), shared)[0].decision is Decision.DEFER
    other = f"{db.name}_b"
    with pg_cluster.connect() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other)))
    try:
        with pg_cluster.connect(other) as conn:
            live_claim_table(conn, rls=True)
        with pytest.raises(SchemaMismatch, match="row-level security"):
            judged(pg_cluster.dsn(dbname=other, user=GUARD_RO_ROLE), shared)
    finally:
        with pg_cluster.connect() as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(other)))


def test_a_failed_read_is_not_handed_on(db):
    """The first host fails closed; the next reads for itself (and fails on its own)."""
    with db.connect() as conn:
        live_claim_table(conn, rls=True)
    shared = SharedFacts()
    for _ in range(2):
        with pytest.raises(SchemaMismatch, match="row-level security"):
            judged(db.dsn_as(GUARD_RO_ROLE), shared)


def test_a_host_stuck_reading_holds_the_others_up_only_briefly():
    """Its own stalled tunnel must not make the others fail for its fault: past
    WAIT_FOR_OTHER_HOST_S they read for themselves, on a copy nobody keeps."""
    shared = SharedFacts()
    key = ("sysid", "started", "db", "role", "path")
    holding, release = threading.Event(), threading.Event()

    def stuck_host():
        with shared.database(key, ["schema"]):
            holding.set()
            release.wait(30)

    stuck = threading.Thread(target=stuck_host)
    stuck.start()
    try:
        assert holding.wait(30)
        with shared.database(key, ["schema"]) as known:
            known["schema"] = "read by the waiting host"
    finally:
        release.set()
        stuck.join(30)
    with shared.database(key, []) as known:
        assert "schema" not in known
    # The wait fits in the margin every poll's budget has beyond its own statements.
    assert WAIT_FOR_OTHER_HOST_S < POLL_MARGIN_S


# --- fab: every host its own PostgreSQL at the same address ---------------------------------


@pytest.fixture
def own_databases(app_host_pg, app_host_factory):
    """Two hosts, each with its own PostgreSQL at 127.0.0.1:5432 holding a database of the
    same name with one live claim; on the second, RLS hides that claim from guard_ro."""
    second = app_host_factory("pg2", engine=None, pg=True)
    name = "shared_name"
    for host, rls in ((app_host_pg, False), (second, True)):
        with host.pg.connect(socket=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with host.pg.connect(name, socket=True) as conn:
            live_claim_table(conn, rls=rls)
    yield name, app_host_pg, second
    with app_host_pg.pg.connect(socket=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.mark.parametrize("second_first", [False, True], ids=["hidden-second", "hidden-first"])
def test_fab_hosts_with_databases_of_their_own_are_each_read(own_databases, tmp_path, second_first):
    name, plain, hidden = own_databases
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(plain.known_hosts_path.read_text() + hidden.known_hosts_path.read_text())
    with hidden.sshd.authorized_keys_path.open("a") as fh:
        fh.write(plain.sshd.client_public_key + "\n")
    section = {
        "connection": {
            "dsn": f"dbname={name} user={GUARD_RO_ROLE}",
            "known_hosts": str(known_hosts),
        },
        "task_timeout": {"source": "fixed", "value_s": 3600},
        "runtime": {"source": "none"},
    }
    config = tmp_path / "fabric.yaml"
    config.write_text(yaml.safe_dump({"leaseguard": section}))
    hosts = [f"root@{plain.addr}", f"root@{hidden.addr}"]
    if second_first:
        hosts.reverse()
    key = str(plain.client_key_path)
    done = run_fab("-f", str(config), "-i", key, "-H", ",".join(hosts), "guard")
    said = done.stdout + done.stderr
    [plain_line] = [line for line in done.stdout.splitlines() if f"{plain.addr} " in line]
    [hidden_line] = [line for line in done.stdout.splitlines() if f"{hidden.addr} " in line]
    assert "decision=defer live=1" in plain_line, said
    assert "decision=failed" in hidden_line and "row-level security" in hidden_line, said
    assert done.returncode == 1
