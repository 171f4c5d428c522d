"""A guard session: look up once, judge as often as needed, over one connection. A broken connection
is replaced once (along the next path if its own died); any other failure is the answer (a retry
would spend the budget twice). A watchdog bounds every poll: TCP waits ~15 min on a partition."""

import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import replace
from typing import Protocol, Unpack

import psycopg

from leaseguard.adapters import db, runtime
from leaseguard.adapters.catalog import StatusColumn
from leaseguard.adapters.guard import Subject, judge_subjects, lease_seconds
from leaseguard.adapters.indexing import advisory_plan_warning
from leaseguard.adapters.runtime import Given, LocalRunner, Runner, offset_from_here
from leaseguard.core import errors, fleet
from leaseguard.core.contract import Contract
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError, NotPrimary, TunnelError
from leaseguard.core.fleet import ClockOffset, FleetFacts
from leaseguard.core.verdict import RuntimeFacts, Verdict
from leaseguard.orchestration.intake import IntakeAccess as IntakeAccess  # the fronts' name here

log = logging.getLogger("leaseguard.session")
POLL_MARGIN_S = 2.0  # round trips, the transaction's small statements, a thread waking up
Conn = psycopg.Connection[tuple[object, ...]]
_END_LEFT_BEHIND = (  # a lost connection's idle backend: a partition leaves it for hours
    "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE pid = %s AND pid <> "
    "pg_backend_pid() AND application_name = %s AND usename = current_user AND state IN ('idle', "
    "'idle in transaction')"
)


class Link(Protocol):  # the path to the database when it is not direct (an SSH tunnel)
    def ensure(self, *, within_s: float = ...) -> None: ...
    def failure(self) -> TunnelError | None: ...
    def cut(self) -> None: ...


class GuardSession:
    """Judges one host, or several ("fleet", `facts` by host) by the fleet rule (`fleet`) or
    `each` by its own facts; `fallbacks`: other paths to the database; `conn`: one already open
    along the first; `host_offsets`: the hosts' clocks minus this machine's (None: read here).
    A start is read on its host's clock, claimed_at on the database's: skewed, a claim just
    after a restart could look orphaned. So starts move into the database clock at the first
    poll; its uncertainty widens the tolerance."""

    def __init__(
        self,
        contract: Contract,
        conninfo: str,
        facts: RuntimeFacts | Mapping[str, RuntimeFacts],
        runner: Runner | None = None,  # None: this machine's
        link: Link | None = None,
        *,
        each: bool = False,
        host_offsets: Mapping[str, ClockOffset] | None = None,
        host_minus_here: ClockOffset | None = None,
        fallbacks: Sequence[tuple[str, Link]] = (),
        host_labels: Mapping[str, str] | None = None,
        intake: IntakeAccess | None = None,
        conn: Conn | None = None,
    ) -> None:
        self.contract, self.runner = contract, runner or LocalRunner()
        self.host = "fleet" if isinstance(facts, Mapping) else self.runner.label
        self.intake = intake or IntakeAccess()
        self.per_host = dict(facts) if isinstance(facts, Mapping) else {}  # several hosts' facts
        self.fleet: FleetFacts | None = None
        self.each: dict[str, tuple[RuntimeFacts, float | None]] | None = None
        if isinstance(facts, Mapping) and not each:
            self.fleet = fleet.combine_facts(facts)
            facts = self.fleet.facts
        elif isinstance(facts, Mapping):
            if not facts:
                raise errors.ConfigError("a fleet judgment needs the facts of at least one host")
            self.each = {}  # sorted by host, as its verdicts are
            for host, its in sorted(facts.items()):
                try:
                    self.each[host] = (its, lease_seconds(contract, its.task_timeout))
                except errors.ConfigError as exc:
                    raise errors.ConfigError(f"host {host}: {exc}") from None
            facts = RuntimeFacts(None, None)
        self.facts = facts
        self.lease_s = None if self.each else lease_seconds(contract, self.facts.task_timeout)
        self.host_offsets, self.host_minus_here = host_offsets, host_minus_here
        self.host_labels = dict(host_labels or {})  # how each host is named in its verdict
        self.clock_offset: ClockOffset | None = None  # measured once, on the first poll
        self.minus_database: dict[str, ClockOffset] = {}  # each host's clock minus the database's
        self.conninfo, self.link = conninfo, link  # the path in use, first of `_paths`
        self._paths: list[tuple[str, Link | None]] = [(conninfo, link), *fallbacks]
        timeouts_s = contract.connect_timeout_s + contract.statement_timeout_ms / 1000
        self.budget_s = timeouts_s + POLL_MARGIN_S  # the longest one poll may take
        self._expired, self._ends_at = False, 0.0  # the watchdog of the poll in flight
        self._conn = conn  # one opened while the lookups ran, or None
        self._status_column: StatusColumn | None = None  # the pre-flight's, once per connection
        self._leftovers: tuple[str, ...] | None = None
        self._backend_pid = conn.info.backend_pid if conn else 0  # the server side of _conn
        self._left_behind = 0  # the server side of a lost connection
        # The cluster reached first, the database judged first, the connection last checked.
        self._cluster: object | None = None
        self._database: object | None = None
        self._identified: Conn | None = None
        self._server_started: object | None = None

    def judge(self) -> Verdict:
        if self.each is not None:  # never the first host's verdict for a fleet's
            raise TypeError("a session of several hosts judges with judge_each()")
        return self._poll()[0]

    def judge_each(self) -> dict[str, Verdict]:
        """Every host's verdict, each by its own facts, from ONE query."""
        assert self.each is not None
        return dict(zip(self.each, self._poll(), strict=True))

    def _poll(self) -> list[Verdict]:
        with self._bounded():
            reused = self._conn is not None
            try:
                return self._judge_on(self._connection())
            except LeaseguardError:
                self._status_column = None  # the error may come from a schema change
                # Replaced once: a shared one that broke meanwhile, or one whose path died.
                broke = self._conn is None or self._conn.closed
                if not (broke and (reused or len(self._paths) > 1)):
                    raise
            self.close()
            return self._judge_on(self._connection())

    def database_identity(self) -> tuple[object, ...]:
        """Which database this session reaches: (cluster, server start, name)."""
        with self._bounded(), closing(self):
            self._connection()
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
            timer.join(timeout=1.0)  # a cut in flight (closing the SSH connection): a moment
            # The budget was this poll's: what follows it (a resume of intake) is not refused.
            self._expired, self._ends_at = False, 0.0

    def handover(self) -> Conn | None:
        """This session's open connection, for another session along the same path."""
        conn, self._conn = self._conn, None
        return conn

    def close(self) -> None:
        if self._conn is not None:
            # Lost rather than ended here: its server side may still be open, for the next.
            if self._conn.closed:  # psycopg: a broken connection is closed too
                self._left_behind = self._backend_pid
            self._conn.close()
            self._conn = self._status_column = None

    def _connection(self) -> Conn:
        if self._conn is not None and self._conn.closed:
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
        if self._left_behind:  # each reconnect ends what it replaces (advisory)
            try:
                with db.read_transaction(self._conn):
                    self._conn.execute(_END_LEFT_BEHIND, (self._left_behind, db.APPLICATION_NAME))
            except psycopg.Error as exc:  # its class only: a driver's text may name the host
                log.debug(
                    "left-behind backend %d not ended (%s)", self._left_behind, type(exc).__name__
                )
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
            with db.read_transaction(conn):
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
        for _ in range(len(self._paths)):
            remaining = (self._ends_at or float("inf")) - time.monotonic()  # outside a poll: inf
            try:
                if self._expired or remaining <= 0:
                    raise self._no_answer()
                if self.link is not None:
                    self.link.ensure(within_s=remaining)
                return db.connect(
                    self.conninfo,
                    self.contract.connect_timeout_s,
                    writable=intake is not None,
                    dbname=access.database,
                    timeout_s=remaining,
                    user=access.user,
                    password=access.password,
                )
            except (DatabaseUnavailable, TunnelError) as exc:
                if isinstance(exc, DatabaseUnavailable) and self.link is not None:
                    exc = self.link.failure() or exc  # named by the tunnel's cause, if it has one
                failure = failure or exc
                self._paths.append(self._paths.pop(0))  # the next path
                self.conninfo, self.link = self._paths[0]
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
            f"no answer from PostgreSQL at {db.describe_target(self.conninfo)} within {budget}"
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
        every = [f for f, _ in self.each.values()] if self.each is not None else [self.facts]
        if self.clock_offset is None and any(f.runtime_started_at is not None for f in every):
            self.clock_offset = self._measure_clock(conn)
        judged = [
            (self.host_labels.get(name, name), facts, lease_s, self.minus_database.get(name))
            for name, (facts, lease_s) in (self.each or {}).items()
        ] or [(self.host, self.facts, self.lease_s, self.clock_offset)]
        subjects = [
            Subject(label, f.task_timeout, lease_s, f.runtime_started_at, offset, f.warnings)
            for label, f, lease_s, offset in judged
        ]
        verdicts, self._status_column = judge_subjects(
            conn, self.contract, subjects, status_column=self._status_column
        )
        advice: tuple[str, ...] = ()
        if self._leftovers is None:  # once per session: the seq-scan advice, intake left paused
            plan = advisory_plan_warning(conn, self.contract, verdicts[0], self._status_column)
            advice = (plan,) if plan else ()
            self._leftovers = self.intake.leftovers(conn, self.connect_writable)
        advice += self._leftovers
        whole = self.fleet.as_dict() if self.fleet is not None else None
        if whole is not None and self.host_offsets is not None and self.minus_database:
            offsets = self.minus_database.items()
            whole["clock_offsets_s"] = {host: round(o.offset_s, 3) for host, o in offsets}
        return [
            replace(v, warnings=(*v.warnings, *advice), fleet=whole, replicas=f.replicas)
            for v, (_, f, _, _) in zip(verdicts, judged, strict=True)
        ]

    def _measure_clock(self, conn: Conn) -> ClockOffset:
        if self.fleet is None and self.each is None:
            host_minus_here = self.host_minus_here or offset_from_here(self.runner)
            return host_minus_here.chained(db.here_minus_database(conn, self.contract))
        per_host, offsets = self.per_host, self.host_offsets
        here_minus_db = db.here_minus_database(conn, self.contract)
        for host in sorted(h for h, f in per_host.items() if f.runtime_started_at is not None):
            if offsets is not None and host not in offsets:
                raise errors.LookupFailed(
                    f"host {host}: no clock reading (its start cannot be compared)"
                )
            from_here = ClockOffset(0.0, 0.0) if offsets is None else offsets[host]
            self.minus_database[host] = from_here.chained(here_minus_db)
        if self.fleet is None:
            return ClockOffset(0.0, 0.0)  # each host's own offset is in minus_database
        self.fleet = fleet.combine_facts(per_host, self.minus_database, self.contract.clock_skew_s)
        self.facts = self.fleet.facts
        return ClockOffset(0.0, max(o.uncertainty_s for o in self.minus_database.values()))

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
    """A session on the DSN as given, looked up on this machine (its clock read when judged)."""
    facts = runtime.resolve_runtime_facts(contract, runner := LocalRunner(), **given)
    return closing(GuardSession(contract, conninfo, facts, runner, intake=intake))
