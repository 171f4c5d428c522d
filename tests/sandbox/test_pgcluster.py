"""The real-PostgreSQL harness itself: cluster, roles, pg_cron and per-test databases."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from sandbox.pgcluster import (
    GUARD_PW_PASSWORD,
    GUARD_PW_ROLE,
    GUARD_RO_ROLE,
    PG_BASE_DIR,
    PgCluster,
    PgClusterError,
)
from tests.support.pg_fixtures import PgDatabase, fresh_database

pytestmark = pytest.mark.integration

# Names of the databases handed out by earlier tests of this module.
_seen_databases: list[str] = []


class Test_the_cluster:
    def test_answers_over_tcp_as_a_postgresql_15_superuser(self, pg_cluster: PgCluster) -> None:
        with pg_cluster.connect() as conn:
            row = conn.execute(
                "SELECT current_setting('server_version_num')::int, rolsuper"
                " FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
        assert row is not None
        version, is_super = row
        assert 150000 <= version < 160000
        assert is_super is True
        assert pg_cluster.host == "127.0.0.1"

    def test_psql_cross_check_reads_over_the_socket(self, pg_cluster: PgCluster) -> None:
        assert pg_cluster.psql("SELECT 40 + 2").strip() == "42"

    def test_has_pg_cron_and_schedules_a_job(self, pg_cluster: PgCluster) -> None:
        assert pg_cluster.psql("SELECT extname FROM pg_extension WHERE extname = 'pg_cron'") == (
            "pg_cron\n"
        )
        with pg_cluster.connect() as conn:
            row = conn.execute("SELECT cron.schedule('* * * * *', 'SELECT 1')").fetchone()
            assert row is not None
            jobid = row[0]
            try:
                listed = conn.execute(
                    "SELECT schedule, command, database FROM cron.job WHERE jobid = %s", (jobid,)
                ).fetchone()
                assert listed == ("* * * * *", "SELECT 1", "postgres")
            finally:
                conn.execute("SELECT cron.unschedule(%s::bigint)", (jobid,))


class Test_the_password_role:
    def test_connects_with_the_right_password(self, pg_cluster: PgCluster) -> None:
        dsn = pg_cluster.dsn(user=GUARD_PW_ROLE, password=GUARD_PW_PASSWORD)
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (GUARD_PW_ROLE,)

    @pytest.mark.parametrize("password", ["wrong-password", None], ids=["wrong", "missing"])
    def test_is_refused_without_the_right_password(
        self, pg_cluster: PgCluster, password: str | None
    ) -> None:
        extra = {} if password is None else {"password": password}
        with pytest.raises(psycopg.OperationalError) as refused:
            psycopg.connect(pg_cluster.dsn(user=GUARD_PW_ROLE, **extra))
        message = str(refused.value)
        assert "password" in message
        assert GUARD_PW_PASSWORD not in message


class Test_the_read_only_role:
    def test_reads_tables_but_cannot_write(self, db: PgDatabase) -> None:
        with db.connect() as admin:
            admin.execute("CREATE TABLE runs (id int)")
            admin.execute("INSERT INTO runs VALUES (1)")
        with db.connect(user=GUARD_RO_ROLE) as ro:
            assert ro.execute("SELECT id FROM runs").fetchall() == [(1,)]
            with pytest.raises(errors.InsufficientPrivilege):
                ro.execute("INSERT INTO runs VALUES (2)")


class Test_the_db_fixture:
    def test_is_an_empty_database_of_its_own(self, db: PgDatabase) -> None:
        assert db.name.startswith("t_")
        with psycopg.connect(db.dsn) as conn:
            row = conn.execute(
                "SELECT current_database(), count(*) FROM pg_tables"
                " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
            ).fetchone()
        assert row == (db.name, 0)

    @pytest.mark.parametrize("turn", ["first", "second"])
    def test_is_fresh_per_test_and_dropped_afterwards(
        self, db: PgDatabase, pg_cluster: PgCluster, turn: str
    ) -> None:
        assert db.name not in _seen_databases
        with db.connect() as conn:
            # Fails with DuplicateTable if a database were shared between tests.
            conn.execute("CREATE TABLE marker (turn text)")
            conn.execute("INSERT INTO marker VALUES (%s)", (turn,))
        assert db.psql("SELECT turn FROM marker") == f"{turn}\n"
        with pg_cluster.connect() as admin:
            alive = {r[0] for r in admin.execute("SELECT datname FROM pg_database").fetchall()}
        assert alive.isdisjoint(_seen_databases)
        _seen_databases.append(db.name)

    def test_tear_down_unschedules_cron_jobs_and_drops_the_database(
        self, pg_cluster: PgCluster
    ) -> None:
        with fresh_database(pg_cluster) as database, pg_cluster.connect() as conn:
            conn.execute(
                "SELECT cron.schedule_in_database('probe', '* * * * *', 'SELECT 1', %s)",
                (database.name,),
            )
        with pg_cluster.connect() as conn:
            jobs = conn.execute(
                "SELECT count(*) FROM cron.job WHERE database = %s", (database.name,)
            )
            assert jobs.fetchone() == (0,)
            dbs = conn.execute(
                "SELECT count(*) FROM pg_database WHERE datname = %s", (database.name,)
            )
            assert dbs.fetchone() == (0,)


class Test_a_second_cluster:
    def test_runs_beside_the_first_and_leaves_nothing_behind(self, pg_cluster: PgCluster) -> None:
        cluster = PgCluster(PG_BASE_DIR)
        with cluster:
            root = cluster.root
            assert cluster.port != pg_cluster.port
            assert cluster.socket_dir.is_dir()
            assert cluster.psql("SELECT 1") == "1\n"
        assert not root.exists()
        cluster.stop()  # a second stop is harmless

    def test_refuses_a_base_dir_the_postgres_user_cannot_reach(self, tmp_path: Path) -> None:
        # pytest's base temp directory is 0700 root: postgres cannot traverse it.
        with pytest.raises(PgClusterError, match="cannot reach"):
            PgCluster(tmp_path).start()
        assert list(tmp_path.iterdir()) == []

    def test_a_failed_start_shows_the_server_log_and_cleans_up(
        self, pg_cluster: PgCluster, traversable_dir: Path
    ) -> None:
        with pytest.raises(PgClusterError, match="could not bind"):
            PgCluster(traversable_dir, port=pg_cluster.port).start()
        assert list(traversable_dir.iterdir()) == []


@pytest.fixture
def traversable_dir() -> Iterator[Path]:
    """An empty directory of this test's own that the postgres OS user can reach."""
    path = Path(tempfile.mkdtemp(prefix="pgharness-", dir=PG_BASE_DIR))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)
