"""A guard session over SSH: lookups on the host, the database through a tunnel.

Kept apart from leaseguard.orchestration.session so that a local session (`leaseguard check`)
never imports Fabric or paramiko.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from psycopg.conninfo import make_conninfo

from leaseguard.adapters.ssh import DatabaseAddress, DatabaseTunnel, FabricRunner, forwarded
from leaseguard.core.contract import Contract
from leaseguard.core.dsn import reject_hostaddr
from leaseguard.orchestration.session import GuardSession, local_session

if TYPE_CHECKING:  # Fabric itself is imported by adapters.ssh, which names the extra if missing
    from fabric import Connection


@contextmanager
def ssh_session(
    connection: Connection,
    contract: Contract,
    conninfo: str,
    address: DatabaseAddress,
    *,
    task_timeout_s: float | None = None,
    runtime_started_at: datetime | None = None,
) -> Iterator[GuardSession]:
    """A session over SSH: lookups on the host, the database through a tunnel."""
    with (
        tunnelled(connection, conninfo, address) as (tunnelled_dsn, tunnel),
        local_session(
            contract,
            tunnelled_dsn,
            task_timeout_s=task_timeout_s,
            runtime_started_at=runtime_started_at,
            runner=FabricRunner(connection),
            link=tunnel,
            one_exec=True,
        ) as session,
    ):
        yield session


@contextmanager
def tunnelled_conninfo(
    connection: Connection, conninfo: str, address: DatabaseAddress
) -> Iterator[str]:
    """`conninfo` (dbname, user, password, ...) reaching `address` through a tunnel.

    Its host and port are replaced by the tunnel's local end, so the database never needs
    an exposed port. Shared by the Fabric tasks and the Ansible plugins.
    """
    with tunnelled(connection, conninfo, address) as (tunnelled_dsn, _):
        yield tunnelled_dsn


@contextmanager
def tunnelled(
    connection: Connection, conninfo: str, address: DatabaseAddress
) -> Iterator[tuple[str, DatabaseTunnel]]:
    """tunnelled_conninfo's conninfo and the tunnel itself (a session's Link)."""
    reject_hostaddr(conninfo)
    with forwarded(connection, address) as tunnel:
        yield make_conninfo(conninfo, host="127.0.0.1", port=str(tunnel.port)), tunnel
