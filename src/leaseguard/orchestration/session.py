"""A guard session: look up once, then judge as often as needed, over one connection.

A broken connection is replaced once (along the next path if its own died); any other failure
is the answer (a retry would spend the budget twice). A watchdog bounds every poll: TCP would
wait ~15 min for a partitioned host."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Protocol, Unpack

import psycopg

from leaseguard.adapters.catalog import StatusColumn
from leaseguard.adapters.db import connect, describe_target, end_left_behind, read_transaction
from leaseguard.adapters.guard import judge_subjects
from leaseguard.adapters.host_lookup import look_up_host
from leaseguard.adapters.indexing import advisory_plan_warning
from leaseguard.adapters.pauses import leftover_warnings, scan_leftovers
from leaseguard.adapters.runtime import Given, LocalRunner, Runner
from leaseguard.core.contract import Contract
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError, NotPrimary, TunnelError
from leaseguard.core.fleet import ClockOffset, FleetFacts, combine_facts
from leaseguard.core.verdict import RuntimeFacts, Verdict
from leaseguard.orchestration.subjects import Judged

POLL_MARGIN_S = 2.0  # round trips, the transaction's small statements, a thread waking up
Conn = psycopg.Connection[tuple[object, ...]]


class Link(Protocol):
    """The path to the database when it is not direct (an SSH tunnel)."""

    def ensure(self, *, within_s: float = ...) -> None: ...
    def failure(self) -> TunnelError | None: ...
    def cut(self) -> None: ...


@dataclass(frozen=True)
class IntakeAccess:
    """Where and as whom pg_cron jobs are held; `owner`, `own_holds`: this run's, no leftovers."""

    database: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    owner: str | None = None
    own_holds: tuple[str, ...] = ()


class GuardSession:
    """Judges one host, a fleet or each host; `fallbacks`: other paths to the database."""

    def __init__(
        self,
        contract: Contract,
        conninfo: str,
        facts: RuntimeFacts | FleetFacts | Mapping[str, RuntimeFacts],
        runner: Runner,
        link: Link | None = None,
        *,
        label: str | None = None,
        host_offsets: Mapping[str, ClockOffset] | None = None,
        host_minus_here: ClockOffset | None = None,
        fallbacks: Sequence[tuple[str, Link]] = (),
        host_labels: Mapping[str, str] | None = None,
        intake: IntakeAccess | None = None,
    ) -> None:
        self.contract, self.runner, self.label = contract, runner, label
        self.intake = intake or IntakeAccess()
        self.judged = Judged(contract, facts, host_offsets, host_minus_here, host_labels)
        self._paths: list[tuple[str, Link | None]] = [(conninfo, link), *fallbacks]
        self._path = 0
        timeouts_s = contract.connect_timeout_s + contract.statement_timeout_ms / 1000
        self.budget_s = timeouts_s + POLL_MARGIN_S  # the longest one poll may take
        self._expired, self._ends_at = False, 0.0  # the watchdog of the poll in flight
        self._plan_checked = False  # the seq-scan advice: once per session, not every poll
        self._conn: Conn | None = None
        self._status_column: StatusColumn | None = None  # the pre-flight's, once per connection
        self._leftovers: tuple[str, ...] | None = None
        self._backend_pid = self._left_behind = 0  # the server side of _conn, of a lost one
        # The cluster reached first, the database judged first, the connection last checked.
        self._cluster: object | None = None
        self._database: object | None = None
        self._identified: Conn | None = None
        self._server_started: object | None = None

    @property
    def conninfo(self) -> str:
        return self._paths[self._path][0]

    @property
    def link(self) -> Link | None:
        return self._paths[self._path][1]

    @property
    def host(self) -> str:
        return self.label or self.runner.label

    @property
    def facts(self) -> RuntimeFacts:
        return self.judged.facts

    def judge(self) -> Verdict:
        if self.judged.each is not None:  # never the first host's verdict for a fleet's
            raise TypeError("a session of several hosts judges with judge_each()")
        return self._poll()[0]

    def judge_each(self) -> dict[str, Verdict]:
        """Every host's verdict, each by its own facts, from ONE query."""
        assert self.judged.each is not None
        return dict(zip(sorted(self.judged.each), self._poll(), strict=True))

    def _poll(self) -> list[Verdict]:
        with self._bounded():
            reused = self._conn is not None
            try:
                return self._judge_on(self._connection())
            except LeaseguardError:
                self._status_column = None  # the error may come from a schema change
                # Replaced once: a shared one that broke meanwhile, or one whose path died.
                broke = self._conn is None or self._conn.closed or self._conn.broken
                if not (broke and (reused or len(self._paths) > 1)):
                    raise
            self.close()
            return self._judge_on(self._connection())

    def database_identity(self) -> tuple[object, ...]:
        """Which database this session reaches: (cluster, server start, name)."""
        with self._bounded():
            try:
                self._connection()
            finally:
                self.close()
        return self._cluster, self._server_started, self._database

    @contextmanager
    def _bounded(self) -> Iterator[None]:
        """A poll cut by a watchdog past the budget, failing with the cause it met."""
        self._expired, self._ends_at = False, time.monotonic() + self.budget_s
        timer = threading.Timer(self.budget_s, self._cut)
        timer.daemon = True
        timer.start()
        try:
            yield
        except LeaseguardError as exc:
            if isinstance(exc, DatabaseUnavailable) and self.link is not None:
                exc = self.link.failure() or exc
            raise (self._no_answer() if self._expired else exc) from None
        finally:
            timer.cancel()
            # A cut in flight (closing the SSH connection) is given a moment, not the budget.
            timer.join(timeout=1.0)
            # The budget was this poll's: what follows it (a resume of intake) is not refused.
            self._expired, self._ends_at = False, 0.0

    def handover(self) -> Conn | None:
        """This session's open connection, for another session along the same path."""
        conn, self._conn = self._conn, None
        return conn

    def adopt(self, conn: Conn) -> None:
        """Judge on `conn`, opened along this session's path while the lookups ran."""
        self.close()
        self._conn, self._backend_pid = conn, conn.info.backend_pid

    def close(self) -> None:
        if self._conn is not None:
            # Lost rather than ended here: its server side may still be open, for the next.
            if self._conn.broken or self._conn.closed:
                self._left_behind = self._backend_pid
            self._conn.close()
            self._conn = self._status_column = None

    def _connection(self) -> Conn:
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self.close()
        if self._conn is None:
            self._conn = self._open()
            self._backend_pid = self._conn.info.backend_pid
        if self._conn is not self._identified:  # before a pid of it is ended: the same cluster
            try:
                self._same_database(self._conn)
            except NotPrimary:
                self.close()
                raise
        if self._left_behind:  # each reconnect ends what it replaces
            end_left_behind(self._conn, self._left_behind)
            self._left_behind = 0
        return self._conn

    def _same_database(self, conn: Conn, *, judged: bool = True) -> None:
        """A new connection reaches this session's first cluster (and, `judged`, database), not
        another (a DSN's host list, a moved name): its rows not judged, its jobs not held."""
        query = (
            "SELECT (pg_catalog.pg_control_system()).system_identifier,"
            " pg_catalog.current_database(),"
            " pg_catalog.date_part('epoch', pg_catalog.pg_postmaster_start_time())"  # any DateStyle
        )
        try:
            with read_transaction(conn):
                found = conn.execute(query).fetchone()
        except psycopg.Error as exc:
            raise DatabaseUnavailable(
                f"host {self.host}: its database could not be identified ({type(exc).__name__})"
            ) from None
        assert found is not None
        cluster, database, started = found
        self._cluster = cluster if self._cluster is None else self._cluster
        self._database = database if judged and self._database is None else self._database
        if cluster != self._cluster or (judged and database != self._database):
            raise NotPrimary(
                f"host {self.host}: the guard's new connection reaches database {database} of "
                f"PostgreSQL cluster {cluster} (system identifier), not the one this session "
                f"began on (cluster {self._cluster}, database {self._database or database}), "
                "so nothing is judged or held there; point the DSN at the primary alone (one "
                "host, not a list) and run again"
            )
        if judged:
            self._identified, self._server_started = conn, started

    def _open(self, intake: IntakeAccess | None = None) -> Conn:
        """A connection (writable as `intake`) on the current path, else the next that answers."""
        access, failure = intake or IntakeAccess(), None
        for _ in self._paths:
            conninfo, link = self._paths[self._path]
            # Unbounded outside a poll (pauses, resumes).
            remaining = self._ends_at - time.monotonic() if self._ends_at else float("inf")
            try:
                if self._expired or remaining <= 0:
                    raise self._no_answer()
                if link is not None:
                    link.ensure(within_s=remaining)
                return connect(
                    conninfo,
                    self.contract.connect_timeout_s,
                    writable=intake is not None,
                    dbname=access.database,
                    timeout_s=remaining,
                    user=access.user,
                    password=access.password,
                )
            except (DatabaseUnavailable, TunnelError) as exc:
                if isinstance(exc, DatabaseUnavailable) and link is not None:
                    exc = link.failure() or exc  # named by the tunnel's cause, if it has one
                failure = failure or exc
                self._path = (self._path + 1) % len(self._paths)
                if self._expired:
                    break
        assert failure is not None
        raise failure

    def _no_answer(self) -> LeaseguardError:
        budget = (
            f"{self.budget_s:.0f}s (connect_timeout_s {self.contract.connect_timeout_s} "
            f"+ statement_timeout_ms {self.contract.statement_timeout_ms} + {POLL_MARGIN_S:.0f}s)"
        )
        if self.link is not None:
            return TunnelError(
                f"host {self.host}: no answer through the SSH tunnel within {budget}; "
                "the host or the network to it is down"
            )
        return DatabaseUnavailable(
            f"no answer from PostgreSQL at {describe_target(self.conninfo)} within {budget}"
        )

    def _cut(self) -> None:
        """On the watchdog's thread: end the waits of the poll in flight."""
        self._expired = True
        if self.link is not None:
            self.link.cut()
        conn = self._conn
        # The thread blocked on it reads end-of-file and fails at once (closed: nothing waits).
        with suppress(OSError, psycopg.Error):
            if conn is not None and not conn.closed:
                with socket.socket(fileno=socket.dup(conn.pgconn.socket)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)

    def _judge_on(self, conn: Conn) -> list[Verdict]:
        subjects = self.judged.subjects(conn, self.runner, self.host)
        verdicts, self._status_column = judge_subjects(
            conn, self.contract, subjects, status_column=self._status_column
        )
        advice: tuple[str, ...] = ()
        if not self._plan_checked:
            self._plan_checked = True
            plan = advisory_plan_warning(conn, self.contract, verdicts[0], self._status_column)
            advice = (plan,) if plan else ()
        return self.judged.finish(verdicts, (*advice, *self._leftover_pauses(conn)))

    def _leftover_pauses(self, conn: Conn) -> tuple[str, ...]:
        """Warnings naming intake a drain paused and never gave back (looked up once)."""
        if self._leftovers is None:
            owner, own = self.intake.owner, self.intake.own_holds
            if self.intake.database is None and self.intake.user is None:
                found = leftover_warnings(conn, exclude_by=owner, own=own)
            else:  # the jobs in another database, or seen by their owner alone
                found = scan_leftovers(self.connect_writable, exclude_by=owner, own=own)
            self._leftovers = tuple(found)
        return self._leftovers

    def connect_writable(self, intake: IntakeAccess | None = None) -> Conn:
        """A writable connection for intake holds, as `intake` (default: the session's)."""
        conn = self._open(intake or self.intake)
        try:
            self._same_database(conn, judged=False)
        except BaseException:
            conn.close()
            raise
        return conn


def local_session(
    contract: Contract, conninfo: str, *, intake: IntakeAccess | None = None, **given: Unpack[Given]
) -> closing[GuardSession]:
    """A session on the DSN as given, looked up here one exec each (no `sh:` in a message)."""
    runner = LocalRunner()
    looked_up = look_up_host(contract, runner, one_exec=False, **given)
    facts, clock = looked_up.facts, looked_up.clock
    return closing(
        GuardSession(contract, conninfo, facts, runner, host_minus_here=clock, intake=intake)
    )


def fleet_session(
    contract: Contract,
    conninfo: str,
    per_host: Mapping[str, RuntimeFacts],
    *,
    each: bool = False,
    runner: Runner | None = None,
    link: Link | None = None,
    host_offsets: Mapping[str, ClockOffset] | None = None,
    intake: IntakeAccess | None = None,
) -> closing[GuardSession]:
    """One session judging every host by the fleet rule (`each`: each by its own facts)."""
    facts = per_host if each else combine_facts(per_host)
    return closing(
        GuardSession(
            contract,
            conninfo,
            facts,
            runner or LocalRunner(),
            link,
            label="fleet",
            intake=intake,
            host_offsets=host_offsets,
        )
    )
