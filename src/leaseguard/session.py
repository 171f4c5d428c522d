"""A guard session on one host: look up once, then judge as often as needed.

The same session serves `leaseguard check` (this machine), `fab guard`/`fab drain` (over
SSH with a tunnel) and the Ansible action plugin. A drain's polls share one database
connection: a connection per poll costs a login each time, and through Fabric's tunnel each
one leaves a finished forwarder behind until the tunnel closes (memory grew with the polls).
A shared connection that broke meanwhile (server idle timeout, restart, dropped tunnel) is
replaced once, at once; a poll fails only when a fresh connection fails too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from fabric import Connection
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from leaseguard.clock import ClockOffset, database_clock, host_clock, measure_offset
from leaseguard.contract import Contract
from leaseguard.db import connect, invalid_dsn
from leaseguard.errors import ConfigError, LeaseguardError
from leaseguard.fleet import combine_facts, in_database_clock
from leaseguard.guard import evaluate, lease_seconds
from leaseguard.indexing import with_plan_warning
from leaseguard.pauses import scan_leftovers
from leaseguard.runtime import LocalRunner, Runner, RuntimeFacts, resolve_runtime_facts
from leaseguard.ssh import DatabaseAddress, FabricRunner, database_tunnel
from leaseguard.verdict import Verdict


class GuardSession:
    """Judges one host's table with the facts looked up on that host."""

    def __init__(
        self,
        contract: Contract,
        conninfo: str,
        facts: RuntimeFacts,
        runner: Runner,
        *,
        label: str | None = None,
        fleet: dict[str, Any] | None = None,
    ) -> None:
        self.contract = contract
        self.conninfo = conninfo
        self.facts = facts
        self.runner = runner
        self.lease_s = lease_seconds(contract, facts.task_timeout)
        # Measured once per session: clocks do not drift measurably during a drain, and a
        # per-poll measurement would add an SSH round trip to every poll.
        self.clock_offset: ClockOffset | None = None
        # The seq-scan advice is given once per session, not on every poll of a drain.
        self.plan_checked = False
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        # The schema pre-flight (two catalog queries) runs once per connection, not per poll.
        self._schema_checked = False
        self.label = label
        self.fleet = fleet
        # Leftover intake pauses (leaseguard.pauses) are looked for once per session, in
        # cron_database (None: the session's own database), except those of `pause_owner`
        # (this process's own drain).
        self.cron_database: str | None = None
        self.pause_owner: str | None = None
        self._leftovers: tuple[str, ...] | None = None

    @property
    def host(self) -> str:
        return self.label or self.runner.label

    def judge(self) -> Verdict:
        """One check on the session's connection (replaced once if it broke meanwhile)."""
        reused = self._conn is not None
        try:
            return self._judge_on(self._connection())
        except LeaseguardError:
            self.close()
            if not reused:
                raise
        return self._judge_on(self._connection())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._schema_checked = False

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self.close()
        if self._conn is None:
            self._conn = connect(self.conninfo, self.contract)
        return self._conn

    def _judge_on(self, conn: psycopg.Connection[tuple[object, ...]]) -> Verdict:
        if self.facts.runtime_started_at is not None:
            self.measure_clock()
        verdict = evaluate(
            conn,
            self.contract,
            task_timeout=self.facts.task_timeout,
            lease_s=self.lease_s,
            runtime_started_at=self.facts.runtime_started_at,
            host=self.host,
            clock_offset=self.clock_offset,
            warnings=self.facts.warnings,
            check_schema=not self._schema_checked,
        )
        self._schema_checked = True
        if not self.plan_checked:
            self.plan_checked = True
            verdict = with_plan_warning(conn, self.contract, verdict)
        extra = self.leftover_pauses()
        if extra or self.fleet:
            verdict = dataclasses.replace(
                verdict, warnings=(*verdict.warnings, *extra), fleet=self.fleet
            )
        return verdict

    def leftover_pauses(self) -> tuple[str, ...]:
        """Warnings naming intake a drain paused and never gave back (looked up once)."""
        if self._leftovers is None:
            self._leftovers = tuple(
                scan_leftovers(
                    lambda: self.connect_writable(self.cron_database), exclude_by=self.pause_owner
                )
            )
        return self._leftovers

    def measure_clock(self) -> ClockOffset:
        """This host's clock offset from the database (measured once per session)."""
        if self.clock_offset is None:
            self.clock_offset = measure_offset(
                host_clock(self.runner), database_clock(self._connection())
            )
        return self.clock_offset

    def connect_writable(self, dbname: str | None = None) -> psycopg.Connection[tuple[object, ...]]:
        """A normal (not read-only) connection through the same path, for intake pauses."""
        conninfo = make_conninfo(self.conninfo, dbname=dbname) if dbname else self.conninfo
        conn = connect(conninfo, self.contract)
        conn.read_only = False
        conn.isolation_level = None
        conn.autocommit = True
        return conn


def fleet_session(sessions: Mapping[str, GuardSession]) -> GuardSession:
    """One session judging with the fleet rule over every host's facts (leaseguard.fleet).

    Each host's start time is first put in the database clock with that host's measured
    offset, so hosts with different clocks compare fairly; the judgment then needs only the
    measurement's uncertainty as extra tolerance. It runs through the first host's
    connection path (the database is shared: that is why its intake is global).
    """
    per_host = {}
    uncertainty = 0.0
    for name, session in sessions.items():
        facts = session.facts
        if facts.runtime_started_at is not None:
            offset = session.measure_clock()
            uncertainty = max(uncertainty, offset.uncertainty_s)
            started = in_database_clock(facts.runtime_started_at, offset.offset_s)
            warnings = facts.warnings
            if offset.exceeds(session.contract.clock_skew_s):
                warnings = (*warnings, offset.warning(name, session.contract.clock_skew_s))
            facts = dataclasses.replace(facts, runtime_started_at=started, warnings=warnings)
        per_host[name] = facts
    combined = combine_facts(per_host)
    first = sessions[combined.hosts[0]]
    session = GuardSession(
        first.contract,
        first.conninfo,
        combined.facts,
        first.runner,
        label="fleet",
        fleet=combined.as_dict(),
    )
    session.clock_offset = ClockOffset(0.0, uncertainty)
    session.cron_database = first.cron_database
    session.pause_owner = first.pause_owner
    return session


@contextmanager
def local_session(
    contract: Contract,
    conninfo: str,
    *,
    task_timeout_s: float | None = None,
    runtime_started_at: datetime | None = None,
    task_timeout_source: str | None = None,
    runner: Runner | None = None,
) -> Iterator[GuardSession]:
    """A session whose DSN is used as given; lookups run here unless another runner is given.

    The Ansible front passes a runner over its own connection when the database is reached
    directly from the controller (`tunnel: false`, or a `local` connection).
    """
    runner = runner or LocalRunner()
    facts = resolve_runtime_facts(
        contract,
        runner,
        task_timeout_s=task_timeout_s,
        runtime_started_at=runtime_started_at,
        task_timeout_source=task_timeout_source,
    )
    session = GuardSession(contract, conninfo, facts, runner)
    try:
        yield session
    finally:
        session.close()


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
        tunnelled_conninfo(connection, conninfo, address) as tunnelled,
        local_session(
            contract,
            tunnelled,
            task_timeout_s=task_timeout_s,
            runtime_started_at=runtime_started_at,
            runner=FabricRunner(connection),
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
    reject_hostaddr(conninfo)
    with database_tunnel(connection, address) as local_port:
        yield make_conninfo(conninfo, host="127.0.0.1", port=str(local_port))


def reject_hostaddr(conninfo: str) -> None:
    """libpq prefers hostaddr to host, so one in the DSN would bypass the address given."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise invalid_dsn(conninfo) from None
    if "hostaddr" in params:
        raise ConfigError("the database address is db_host/db_port, not hostaddr in the DSN")
