"""Intake holds, one record (an inactive cron.job row) per holder: the LAST to let go gives back."""

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from threading import Event
from typing import Any

import psycopg

from leaseguard.adapters import cron
from leaseguard.adapters.db import Connection, read_transaction
from leaseguard.core.errors import DatabaseError

log = logging.getLogger("leaseguard.pauses")

RECORD_PREFIX = "leaseguard-paused:"
_MARKER = "leaseguard pause record"
_NEVER = "0 0 31 2 *"  # 31 February: a record is a row, never a run
_RECORDS = "SELECT jobname, command FROM cron.job WHERE starts_with(jobname, %s) ORDER BY jobid"
HOLDS_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('leaseguard intake holds', 0))"
# Asked so it cannot fail: reading a missing cron.job would log a server ERROR every check.
_RECORDS_READABLE = """
SELECT has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'cron' AND c.relname = 'job'"""
# A pause stops new runs, not one already started (a claim loop goes on after the commit).
# pg_cron marks a run in flight when its job is paused 'failed' ('job canceled', no end_time)
# and drops its connection, but the backend runs on to the end of its statement: such a run
# counts while its backend lives (one started within a minute of the run: not a reused pid).
_RUNS_IN_PROGRESS = """
SELECT count(*) FROM cron.job_run_details d WHERE d.jobid = ANY(%s)
  AND (d.status IN ('starting', 'running') OR d.end_time IS NULL)
  AND ((d.status IN ('starting', 'running') AND coalesce(d.job_pid, 0) = 0)
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = d.job_pid
                  AND a.backend_start <= coalesce(d.start_time, now()) + interval '1 minute'))"""
# Nothing recorded: nothing held, unless this role cannot see the jobs (pg_cron's rule).
_SEES_JOBS = """SELECT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
       OR EXISTS (SELECT 1 FROM cron.job)"""
RESUME_HINT = (
    "`leaseguard resume --cron-database <db>` (same connection options as the drain), "
    "`fab -H <host> resume`, or `ansible-playbook leaseguard.deploy.resume`"
)
_PRIVILEGE_HINT = (
    "connect as the role that owns the intake jobs (pg_cron shows and lets each role alter "
    "only its own jobs): --cron-user / drain.cron_user / leaseguard_cron_user"
)
# pg_cron may start one more run planned when the pause committed: give it a tick to appear.
QUIET_SETTLE_S = 1.0
DEFAULT_QUIET_TIMEOUT_S = 120.0
ConnectionCM = AbstractContextManager[Connection]


@dataclass(frozen=True)
class PauseRecord:
    """One holder's hold on one job."""

    job: str
    paused_at: str
    by: str
    action: str = "drain"
    token: str = ""
    pid: int = 0  # the holding process (0: not recorded), its start and machine
    started: int = 0
    host: str = ""
    jobid: int = 0  # the held job's (0: not recorded): a job re-created since is not it

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "token"}

    def holder_alive(self) -> str | None:
        """Why this hold must be kept (its holder runs, or cannot be checked); None: gone."""
        if self.pid and self.host != socket.gethostname():
            return f"its holder runs on {self.host or 'another machine'}, which cannot be checked"
        if self.pid and process_alive(self.pid, self.started or None):  # not a reused pid
            return f"its holder (pid {self.pid}) is still running"
        return None  # recorded without a holder, or gone


@dataclass(frozen=True)
class Hold:
    """What one holder holds: its token and the jobs it counts on."""

    token: str
    jobs: tuple[str, ...]
    jobids: tuple[int, ...]
    by: str
    action: str
    switched: tuple[str, ...] = ()  # paused by this hold (the others were held already)
    not_held: tuple[str, ...] = ()  # inactive without any record: an operator's, untouched

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Hold":
        try:
            jobs, jobids = tuple(map(str, data["jobs"])), tuple(map(int, data.get("jobids", ())))
            by, action = str(data.get("by", "")), str(data.get("action", ""))
            return cls(str(data["token"]), jobs, jobids, by, action)
        except (KeyError, TypeError, ValueError):
            raise DatabaseError(
                "the intake hold to release is not one leaseguard took (no token or jobs): "
                f"pass the registered hold as it is, or give intake back with {RESUME_HINT}"
            ) from None


def drain_identity(front: str, pid: int | None = None) -> str:
    """Who holds: the front, this process (or `pid`) and this machine (no secret)."""
    return f"{front} pid {pid or os.getpid()} on {socket.gethostname()}"


def hold_jobs(
    conn: Connection, jobs: Sequence[str], by: str, action: str = "drain", holder: int | None = None
) -> Hold:
    """Hold `jobs` (all exist); `holder`: the pid whose life the hold lasts (resume keeps it)."""
    token, here = secrets.token_hex(6), socket.gethostname()
    alive = (holder, process_start_ticks(holder) or 0, here) if holder else (0, 0, "")
    with _holds_transaction(conn) as step:
        changes = cron.plan_changes(conn, dict.fromkeys(jobs, False))
        if missing := [c.job for c in changes if not c.exists]:
            raise DatabaseError(
                f"pg_cron job(s) not found: {', '.join(missing)} (as role {conn.info.user}; "
                f"pg_cron shows each role only its own jobs: {_PRIVILEGE_HINT}); nothing was paused"
            )
        # A live holder keeps its job inactive: records on an ACTIVE job are stale (a killed
        # run's, the job switched back on by hand); counted, they would keep it paused.
        active = {c.job for c in changes if c.changed}
        records = read_records(conn)
        if stale := [r for r in records if r.job in active]:
            for r in stale:
                log.warning(
                    f"stale intake hold dropped: pg_cron job {r.job} is active but was recorded "
                    f"as paused at {r.paused_at} by {r.by} (for: {r.action})"
                )
            step.doing = "deleting stale hold records"
            _forget(conn, [_record_name(r.job, r.token) for r in stale])
        held_by_others = {record.job for record in records if record.job not in active}
        held = [c for c in changes if c.changed or c.job in held_by_others]
        cron.apply_changes(conn, step, held)
        row = conn.execute("SELECT now()").fetchone()
        stamp = row[0].isoformat() if row else "unknown"
        for change in held:
            step.doing = f"recording the hold on pg_cron job {change.job}"
            record = PauseRecord(change.job, stamp, by, action, token, *alive, change.jobid or 0)
            command = f"SELECT 1 -- {_MARKER} {json.dumps(asdict(record))}"
            conn.execute(
                "SELECT cron.alter_job(cron.schedule(%s, %s, %s), active := false)",
                (_record_name(change.job, token), _NEVER, command),
            )
    jobids = tuple(int(c.jobid) for c in held if c.jobid is not None)
    switched = tuple(c.job for c in held if c.changed)
    not_held = tuple(c.job for c in changes if c not in held)
    return Hold(token, tuple(c.job for c in held), jobids, by, action, switched, not_held)


def release_hold(
    conn: Connection, hold: Hold
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """Let go of `hold`: its records deleted, each job no other holder holds given back; returns
    the jobs given back, and the jobs other holders still hold (by whom)."""
    with _holds_transaction(conn) as step:
        others: dict[str, list[str]] = {}
        for record in read_records(conn):
            if record.token != hold.token:
                others.setdefault(record.job, []).append(record.by)
        step.doing = "deleting this hold's records"
        _forget(conn, [_record_name(job, hold.token) for job in hold.jobs])
        changes = cron.plan_changes(conn, {job: True for job in hold.jobs if job not in others})
        if hold.jobids:  # a job re-created under a held name since is not the one held
            changes = [c for c in changes if not c.exists or c.jobid in hold.jobids]
        cron.apply_changes(conn, step, changes)
    still_held = {job: tuple(others[job]) for job in hold.jobs if job in others}
    return tuple(c.job for c in changes if c.changed), still_held


def resume_recorded(
    conn: Connection, jobs: Sequence[str] | None = None, *, force: bool = False
) -> dict[str, Any]:
    """Give back the holds (on `jobs`) whose holder is gone (all if `force`): what `resume` did."""
    changes: list[cron.ActiveChange] = []
    with _holds_transaction(conn) as step:
        records, kept = resumable(conn, jobs, force=force)
        for record in records if force else ():
            if why := record.holder_alive():
                log.warning(
                    "resume --force: giving back %s's hold on %s (%s)", record.by, record.job, why
                )
        free = {r.job for r in records} - {r.job for r, _ in kept}
        if records:
            step.doing = "deleting the hold records"
            _forget(conn, [_record_name(r.job, r.token) for r in records])
            # A job deleted and re-created under the held name since is not the one held: untouched.
            ids = {r.job: {x.jobid for x in records if x.job == r.job} - {0} for r in records}
            changes = cron.plan_changes(conn, dict.fromkeys(sorted(free), True))
            changes = [
                c for c in changes if not c.exists or not ids[c.job] or c.jobid in ids[c.job]
            ]
            cron.apply_changes(conn, step, changes)
    return {
        "records": [record.as_dict() for record in records],
        "resumed": [c.job for c in changes if c.changed],
        "already_active": [c.job for c in changes if c.exists and not c.changed],
        "missing": [c.job for c in changes if not c.exists],
        "kept": [{**record.as_dict(), "reason": why} for record, why in kept],
        "role": conn.info.user,  # what it could see
        "database": conn.info.dbname,
        "replaced": sorted(free - {c.job for c in changes}),  # deleted and re-created since
    }


def resumable(
    conn: Connection, jobs: Sequence[str] | None, *, force: bool
) -> tuple[list[PauseRecord], list[tuple[PauseRecord, str]]]:
    """What a resume gives back (of `jobs`), and what it keeps (unless `force`) and why; no hold
    found fails unless this role can see the jobs (else "nothing held" is unknown)."""
    records = [r for r in read_records(conn) if jobs is None or r.job in jobs]
    if not records and conn.execute(_SEES_JOBS).fetchone() != (True,):
        raise DatabaseError(
            f"role {conn.info.user} sees no pg_cron job in database {conn.info.dbname} "
            "(pg_cron shows each role only its own jobs), so it cannot tell whether "
            "intake is still held: run resume as the jobs' owner (--cron-user, "
            "drain.cron_user, leaseguard_cron_user)"
        )
    checked = [(r, None if force else r.holder_alive()) for r in records]
    return [r for r, why in checked if not why], [(r, why) for r, why in checked if why]


def wait_quiet(
    connect: Callable[[], ConnectionCM], hold: Hold, *, timeout_s: float, stop: Event | None = None
) -> None:
    """Return once no held job's run is in progress or `stop` is set; fail closed naming them."""
    if not hold.jobids:
        return
    started, stop = time.monotonic(), stop or Event()
    with connect() as conn:
        while not stop.is_set():
            with cron.cron_transaction(conn, read_only=True, privilege_hint=_PRIVILEGE_HINT):
                row = conn.execute(_RUNS_IN_PROGRESS, (list(hold.jobids),)).fetchone()
            running, waited = int(row[0]) if row else 0, time.monotonic() - started
            if running == 0 and waited >= QUIET_SETTLE_S:
                return
            if waited > timeout_s:
                raise DatabaseError(
                    f"intake is not quiet: {running} run(s) of pg_cron job(s) "
                    f"{', '.join(hold.jobs)} still in progress {timeout_s:g}s after the pause; "
                    "not judging while intake may still claim"
                )
            stop.wait(0.1)


def lost_jobs(conn: Connection, hold: Hold) -> list[str]:
    """The held jobs switched back on, or re-created (active, a new jobid), since the hold."""
    with cron.cron_transaction(conn, read_only=True, privilege_hint=_PRIVILEGE_HINT):
        rows = conn.execute(
            "SELECT jobid, jobname FROM cron.job WHERE active AND (jobid = ANY(%s) "
            "OR jobname = ANY(%s))",
            (list(hold.jobids), list(hold.jobs)),
        ).fetchall()
    ids, names = {int(row[0]) for row in rows}, {str(row[1]) for row in rows}
    held = zip(hold.jobs, hold.jobids, strict=True)
    return [job for job, jobid in held if jobid in ids or job in names]


def read_records(conn: Connection) -> list[PauseRecord]:
    """Every hold record this role can see (raw psycopg errors); no token: a single holder's."""
    records = []
    for name, command in conn.execute(_RECORDS, (RECORD_PREFIX,)):
        job, _, token = str(name).removeprefix(RECORD_PREFIX).rpartition("@")
        job, token = (job, token) if job else (token, "")
        try:
            data = json.loads(str(command).partition(_MARKER)[2])
            job, at, by = str(data["job"]), str(data["paused_at"]), str(data["by"])
            action, host = str(data.get("action", "drain")), str(data.get("host", ""))
            pid, started, jobid = (int(data.get(k, 0)) for k in ("pid", "started", "jobid"))
            records.append(PauseRecord(job, at, by, action, token, pid, started, host, jobid))
        except (ValueError, KeyError, TypeError):
            records.append(PauseRecord(job, "an unknown time", "an unknown drain", "drain", token))
    return records


def leftover_warnings(
    conn: Connection, *, exclude_by: str | None = None, own: Sequence[str] = ()
) -> list[str]:
    """Warnings for holds not given back but this run's (`own`: tokens); [] if unreadable."""
    try:
        with read_transaction(conn):
            readable = conn.execute(_RECORDS_READABLE).fetchone()
            records = read_records(conn) if readable and readable[0] else []
    except psycopg.Error as exc:
        log.debug("pause records not readable (%s)", type(exc).__name__)
        return []
    warnings, here = [], socket.gethostname()
    for r in records:
        if (exclude_by is not None and r.by == exclude_by) or (r.token and r.token in own):
            continue
        if (why := r.holder_alive()) and r.host == here:
            continue  # held by a run still going on this machine: not left over
        hint = f"`leaseguard resume --force` or `fab resume --force` ({why})" if why else ""
        warnings.append(
            f"pg_cron job {r.job} is still paused: paused at {r.paused_at} by {r.by} (for: "
            f"{r.action}) and not given back yet; if that run is gone, give it back with "
            f"{hint or RESUME_HINT}"
        )
    return warnings


def scan_leftovers(
    connect: Callable[[], Connection], *, exclude_by: str | None = None, own: Sequence[str] = ()
) -> list[str]:
    """leftover_warnings over a connection of its own (closed after); [] if none opens."""
    try:
        with connect() as conn:
            return leftover_warnings(conn, exclude_by=exclude_by, own=own)
    except Exception as exc:
        log.debug("pause records not readable (%s)", type(exc).__name__)
        return []


@contextmanager
def _holds_transaction(conn: Connection) -> Iterator[cron.CronStep]:
    """A cron.job transaction that first takes the holds' lock: holds never interleave."""
    with cron.cron_transaction(conn, read_only=False, privilege_hint=_PRIVILEGE_HINT) as step:
        conn.execute(HOLDS_LOCK)
        yield step


def process_start_ticks(pid: int | None) -> int | None:
    """The process's start in clock ticks since boot (Linux; None unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return int(fields[19])  # field 22 of stat(5); fields here start at field 3
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, started: int | None = None) -> bool:
    """Whether `pid` runs here and, given its `started`, is that process (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a pid no process can have
        return False
    except PermissionError:  # alive, another user's
        pass
    return not started or process_start_ticks(pid) in (None, started)


def _record_name(job: str, token: str) -> str:
    return f"{RECORD_PREFIX}{job}@{token}" if token else f"{RECORD_PREFIX}{job}"


def _forget(conn: Connection, names: list[str]) -> None:
    conn.execute("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = ANY(%s)", (names,))
