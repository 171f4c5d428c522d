"""A guard session: look up once, then judge as often as needed, over one connection.

Every front judges through it; whom it judges (one host, a fleet by the fleet rule, or each
host of a fleet in one query) is leaseguard.orchestration.subjects'. A connection that broke
(idle timeout, restart, dropped tunnel) is replaced once, along the next path if its own
died; any other failure (a lock or statement timeout, a schema error) is the answer:
retrying would spend its budget twice. A watchdog bounds every poll (connect timeout +
statement budget + a margin): a partitioned host answers nothing, and TCP would wait ~15 min.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol, TypeVar, Unpack

import psycopg

from leaseguard.adapters.db import connect, describe_target, end_left_behind
from leaseguard.adapters.guard import judge_subjects
from leaseguard.adapters.host_lookup import look_up_host
from leaseguard.adapters.pauses import leftover_warnings, scan_leftovers
from leaseguard.adapters.plan_warning import advisory_plan_warning
from leaseguard.adapters.runtime import Given, LocalRunner, Runner
from leaseguard.adapters.statuses import StatusColumn
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import Contract
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError, TunnelError
from leaseguard.core.fleet import FleetFacts, combine_facts
from leaseguard.core.verdict import RuntimeFacts, Verdict
from leaseguard.orchestration.poll_watch import PollWatch, shutdown_socket
from leaseguard.orchestration.subjects import Judged

# Round trips, the transaction's small statements, a thread waking up.
POLL_MARGIN_S = 2.0
Conn = psycopg.Connection[tuple[object, ...]]
T = TypeVar("T")


class Link(Protocol):
    """The path to the database when it is not direct (an SSH tunnel)."""

    def ensure(self, *, within_s: float = ...) -> None: ...

    def failure(self) -> TunnelError | None: ...

    def cut(self) -> None: ...


def _bounded(judge: Callable[[GuardSession], T]) -> Callable[[GuardSession], T]:
    """A poll within the session's budget, failing with the cause it met (a lost link first)."""

    @functools.wraps(judge)
    def bounded(self: GuardSession) -> T:
        with self.watch.poll():
            try:
                return judge(self)
            except LeaseguardError as exc:
                raise self.explain(exc) from None

    return bounded


class GuardSession:
    """Judges the table with one host's facts, a fleet's combined facts (`FleetFacts`) or
    each host's own (a mapping); `host_offsets` are the hosts' clocks minus this machine's."""

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
    ) -> None:
        self.contract = contract
        # Whom it judges: this host, the fleet by the fleet rule, or each host of a fleet.
        self.judged = Judged(contract, facts, host_offsets, host_minus_here, host_labels)
        # The paths to the database, tried in turn: one host's tunnel, then the others'.
        self._paths: list[tuple[str, Link | None]] = [(conninfo, link), *fallbacks]
        self._path = 0
        self.runner = runner
        self.label = label
        self.watch = PollWatch(self.poll_budget_s, self._cut)
        # The seq-scan advice is given once per session, not on every poll of a drain.
        self.plan_checked = False
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        # The schema pre-flight runs once per connection; the status check on every poll.
        self._status_column: StatusColumn | None = None
        # Leftover intake pauses are looked for once, in cron_database (None: this
        # database), except those of `pause_owner` (this process's own drain).
        self.cron_database: str | None = None
        self.cron_user: str | None = None  # the intake's own role (owns the pg_cron jobs)
        self.cron_password: str | None = None
        self.pause_owner: str | None = None
        self._leftovers: tuple[str, ...] | None = None
        self._backend_pid = self._left_behind = 0  # the server side of _conn, of a lost one

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
    def poll_budget_s(self) -> float:
        """The longest one poll may take: connect timeout + statement budget + margin."""
        contract = self.contract
        return contract.connect_timeout_s + contract.statement_timeout_ms / 1000 + POLL_MARGIN_S

    @property
    def facts(self) -> RuntimeFacts:
        return self.judged.facts

    def judge(self) -> Verdict:
        """One check on the session's connection (replaced once if it broke meanwhile)."""
        if self.judged.each is not None:
            raise TypeError("a session of several hosts judges with judge_each()")
        return self._poll()[0]

    def judge_each(self) -> dict[str, Verdict]:
        """Every host's verdict, each by its own facts, from ONE query over one connection."""
        assert self.judged.each is not None
        return dict(zip(sorted(self.judged.each), self._poll(), strict=True))

    @_bounded
    def _poll(self) -> list[Verdict]:
        reused = self._conn is not None
        try:
            return self._judge_on(self._connection())
        except LeaseguardError:
            # The next poll re-reads the catalog: the error may come from a schema change.
            self._status_column = None
            # A connection lost under the poll is replaced once: a shared one that broke
            # meanwhile, or one whose path died while other hosts' paths remain.
            if not (self._connection_broke() and (reused or len(self._paths) > 1)):
                raise
        self.close()
        return self._judge_on(self._connection())

    @_bounded
    def database_identity(self) -> tuple[object, ...]:
        """Which database this session reaches (server start, name), on a short connection:
        hosts reaching the same one share one connection."""
        query = "SELECT pg_catalog.pg_postmaster_start_time(), pg_catalog.current_database()"
        try:
            row = self._connection().execute(query).fetchone()
        except psycopg.Error as exc:
            raise DatabaseUnavailable(
                f"host {self.host}: its database could not be identified ({type(exc).__name__})"
            ) from None
        finally:
            self.close()
        assert row is not None
        return tuple(row)

    def handover(self) -> Conn | None:
        """This session's open connection, for another session along the same path."""
        conn, self._conn = self._conn, None
        return conn

    def adopt(self, conn: Conn) -> None:
        """Judge on `conn`, opened along this session's path while the lookups ran."""
        self.close()
        self._conn, self._backend_pid = conn, conn.info.backend_pid

    def _connection_broke(self) -> bool:
        """True when the connection itself is gone (server restart, terminated, idle cut)."""
        return self._conn is None or self._conn.closed or self._conn.broken

    def close(self) -> None:
        if self._conn is not None:
            # Lost, or closed by a failed rollback, rather than ended here: its server side
            # may still be open (a partition), for the next connection to end.
            if self._conn.broken or self._conn.closed:
                self._left_behind = self._backend_pid
            self._conn.close()
            self._conn = None
            self._status_column = None

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self.close()
        if self._conn is None:
            self._conn = self._open()
            self._backend_pid = self._conn.info.backend_pid
            if self._left_behind:  # each reconnect ends what it replaces
                end_left_behind(self._conn, self._left_behind)
                self._left_behind = 0
        return self._conn

    def _open(
        self, *, writable: bool = False, dbname: str | None = None, as_intake: bool = False
    ) -> Conn:
        """A new connection within what is left of the poll: along the current path, else
        each other host's in turn; the path that answers stays the current one."""
        failure: LeaseguardError | None = None
        for _ in self._paths:
            try:
                return self._open_via(*self._paths[self._path], writable, dbname, as_intake)
            except (DatabaseUnavailable, TunnelError) as exc:
                failure = failure or exc
                self._path = (self._path + 1) % len(self._paths)
                if self.watch.expired:
                    break
        assert failure is not None
        raise failure

    def _open_via(
        self, conninfo: str, link: Link | None, writable: bool, dbname: str | None, as_intake: bool
    ) -> Conn:
        remaining = self.watch.remaining_s()
        if self.watch.expired or remaining <= 0:
            raise self._expired()
        if link is not None:
            link.ensure(within_s=remaining)
        try:
            return connect(
                conninfo,
                self.contract.connect_timeout_s,
                writable=writable,
                dbname=dbname,
                timeout_s=remaining,
                user=self.cron_user if as_intake else None,
                password=self.cron_password if as_intake else None,
            )
        except DatabaseUnavailable:
            failure = link.failure() if link is not None else None
            if failure is not None:
                raise failure from None
            raise

    def explain(self, exc: LeaseguardError) -> LeaseguardError:
        """The cause a failed poll met: its budget running out, or the tunnel's own failure."""
        if self.watch.expired:
            return self._expired()
        if isinstance(exc, DatabaseUnavailable) and self.link is not None:
            return self.link.failure() or exc
        return exc

    def _expired(self) -> LeaseguardError:
        budget = (
            f"{self.poll_budget_s:.0f}s (connect_timeout_s {self.contract.connect_timeout_s} "
            f"+ statement_timeout_ms {self.contract.statement_timeout_ms} + "
            f"{POLL_MARGIN_S:.0f}s)"
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
        """Runs on the watchdog's thread: end the waits the poll in flight is in."""
        if self.link is not None:
            self.link.cut()
        conn = self._conn
        if conn is not None and not conn.closed:
            shutdown_socket(conn)

    def _judge_on(self, conn: psycopg.Connection[tuple[object, ...]]) -> list[Verdict]:
        subjects = self.judged.subjects(conn, self.runner, self.host)
        verdicts, self._status_column = judge_subjects(
            conn, self.contract, subjects, status_column=self._status_column
        )
        return self.judged.finish(verdicts, self._advice(conn, verdicts[0]))

    def _reads_own_cron(self) -> bool:
        """Whether cron.job is read on the guard's own connection, in its database and as its
        role (pg_cron shows each role its own jobs only)."""
        return self.cron_database is None and self.cron_user is None

    def _advice(self, conn: Conn, verdict: Verdict) -> tuple[str, ...]:
        """The warnings given once per session: the plan's, the leftover pauses'."""
        advice: tuple[str, ...] = ()
        if not self.plan_checked:
            self.plan_checked = True
            plan = advisory_plan_warning(conn, self.contract, verdict, self._status_column)
            advice = (plan,) if plan else ()
        return (*advice, *self.leftover_pauses())

    def leftover_pauses(self) -> tuple[str, ...]:
        """Warnings naming intake a drain paused and never gave back (looked up once)."""
        if self._leftovers is None and self._reads_own_cron() and self._conn is not None:
            # cron.job is in this database: read on the guard's connection, not a new one.
            self._leftovers = tuple(leftover_warnings(self._conn, exclude_by=self.pause_owner))
        if self._leftovers is None:
            self._leftovers = tuple(
                scan_leftovers(
                    lambda: self.connect_writable(self.cron_database), exclude_by=self.pause_owner
                )
            )
        return self._leftovers

    def connect_writable(self, dbname: str | None = None) -> psycopg.Connection[tuple[object, ...]]:
        """A normal (not read-only) connection through the same path, for intake holds: as
        the intake's own role when one is configured (`cron_user`)."""
        return self._open(writable=True, dbname=dbname, as_intake=True)


@contextmanager
def local_session(
    contract: Contract,
    conninfo: str,
    *,
    runner: Runner | None = None,
    link: Link | None = None,
    **given: Unpack[Given],
) -> Iterator[GuardSession]:
    """A session on the DSN as given; lookups run here unless another runner is given
    (one exec each: a local one exec would add `sh:` to a missing command's message)."""
    runner = runner or LocalRunner()
    looked_up = look_up_host(contract, runner, one_exec=False, **given)
    facts, host_minus_here = looked_up.facts, looked_up.clock
    session = GuardSession(contract, conninfo, facts, runner, link, host_minus_here=host_minus_here)
    try:
        yield session
    finally:
        session.close()


@contextmanager
def fleet_session(
    contract: Contract,
    conninfo: str,
    per_host: Mapping[str, RuntimeFacts],
    *,
    runner: Runner | None = None,
    link: Link | None = None,
    host_offsets: Mapping[str, ClockOffset] | None = None,
    fallbacks: Sequence[tuple[str, Link]] = (),
) -> Iterator[GuardSession]:
    """One session judging once for every host by the fleet rule, on facts already looked
    up. `host_offsets` (the hosts' clocks minus this machine's) move every start into the
    database clock; without them starts are taken as read here. `runner`/`link` are the
    path the judgment runs through; `fallbacks` the other hosts' paths, tried in turn."""
    session = GuardSession(
        contract,
        conninfo,
        combine_facts(per_host),
        runner or LocalRunner(),
        link,
        label="fleet",
        host_offsets=host_offsets,
        fallbacks=fallbacks,
    )
    try:
        yield session
    finally:
        session.close()
