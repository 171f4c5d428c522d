"""A real streaming standby of a throwaway primary: pg_basebackup -R, started as postgres.

The primary is a cluster of its own (not the session's), so allowing replication on it and
pausing its standby's replay touch no other test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sandbox.pgcluster import PG_BASE_DIR, PG_BIN, SUPERUSER, PgCluster


class StandbyCluster(PgCluster):
    """A hot standby of `primary`, streaming from it over its unix socket."""

    def __init__(self, primary: PgCluster) -> None:
        super().__init__(primary.base_dir)
        self.primary = primary

    def _initdb(self) -> None:
        self._run_pg(
            [
                *(str(PG_BIN / "pg_basebackup"), "-D", str(self.data_dir), "-R", "-X", "stream"),
                *("-h", str(self.primary.socket_dir), "-p", str(self.primary.port)),
                *("-U", SUPERUSER, "--no-sync"),
            ]
        )

    def _write_hba(self) -> None:
        """The primary's rules came with the base backup."""

    def _write_config(self, port: int) -> None:
        super()._write_config(port)  # rewrites postgresql.auto.conf: say where to stream from
        conninfo = f"host={self.primary.socket_dir} port={self.primary.port} user={SUPERUSER}"
        with (self.data_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")

    def _create_roles_and_extensions(self) -> None:
        """A standby is read-only: it has the primary's roles and extensions already."""


@contextlib.contextmanager
def primary_with_standby() -> Iterator[tuple[PgCluster, StandbyCluster]]:
    """A fresh primary that allows replication on its socket, and its running standby."""
    with PgCluster(PG_BASE_DIR) as primary:
        with (primary.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("local replication all trust\n")
        with primary.connect(socket=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        with StandbyCluster(primary) as standby:
            yield primary, standby
