"""What every front runs around a session: the `drain:` options, a drain, signals, logging."""

import logging
import math
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from leaseguard.adapters.pauses import RESUME_HINT, drain_identity
from leaseguard.adapters.runtime import Runner
from leaseguard.core.config_values import parse_command, reject_unknown
from leaseguard.core.errors import ConfigError, LeaseguardError
from leaseguard.core.verdict import Verdict
from leaseguard.orchestration.drain import Action, Drainer, DrainResult, TerminalProgress
from leaseguard.orchestration.drain_status import StatusBoard
from leaseguard.orchestration.intake import CommandPause, CronJobsPause, Intakes, Part
from leaseguard.orchestration.session import GuardSession, IntakeAccess

DEFAULT_POLL_S = 5.0
# A failed resume is retried this long: enough for a restart or a failover, short enough to notice.
DEFAULT_RESUME_RETRY_S = 60.0
T = TypeVar("T")


@dataclass(frozen=True)
class DrainOptions:
    poll_s: float = DEFAULT_POLL_S
    deadline_s: float | None = None
    pause_cron_jobs: tuple[str, ...] = ()
    cron_database: str | None = None
    cron_user: str | None = None  # the jobs' owner: pg_cron shows each role only its own
    cron_password: str | None = field(default=None, repr=False)
    pause_command: tuple[str, ...] = ()
    resume_command: tuple[str, ...] = ()
    status_file: str | None = None
    metrics_file: str | None = None
    resume_retry_s: float = DEFAULT_RESUME_RETRY_S

    def intake(self, front: str | None = None) -> IntakeAccess:
        """Where and as whom intake is held; `front` names this process's own drain."""
        owner = drain_identity(front) if front else None
        return IntakeAccess(self.cron_database, self.cron_user, self.cron_password, owner)

    def board(self) -> StatusBoard:
        """The status/metrics files, written once before any pause."""
        return StatusBoard(self.status_file, self.metrics_file)


def drain_options(data: Mapping[str, Any] | None) -> DrainOptions:
    """Validate the `drain:` section; messages name the key."""
    data = dict(data or {})
    reject_unknown(data, frozenset(DrainOptions.__dataclass_fields__), prefix="drain.")
    jobs = data.get("pause_cron_jobs") or ()
    jobs = (jobs,) if isinstance(jobs, str) else jobs
    if not all(isinstance(j, str) and j for j in jobs):
        raise ConfigError("drain.pause_cron_jobs must be a list of job names")
    pause = parse_command(data, "pause_command", prefix="drain.")
    resume = parse_command(data, "resume_command", prefix="drain.")
    if bool(pause) != bool(resume):
        raise ConfigError("drain.pause_command and drain.resume_command go together")
    password = data.get("cron_password") or os.environ.get("LEASEGUARD_CRON_PASSWORD")
    given: dict[str, Any] = dict(pause_command=pause, resume_command=resume, cron_password=password)
    given.update(pause_cron_jobs=tuple(jobs), cron_user=data.get("cron_user") or None)
    given["cron_database"] = data.get("cron_database")
    for key in ("status_file", "metrics_file"):
        value = data.get(key)
        if value not in (None, "") and not isinstance(value, str | os.PathLike):
            raise ConfigError(f"drain.{key} must be a file path")
        given[key] = None if value in (None, "") else str(value)
    for key in ("poll_s", "deadline_s", "resume_retry_s"):
        if (value := data.get(key)) is None:
            continue  # the default
        try:
            if isinstance(value, str) and not value.isascii():
                raise ValueError  # float() reads any script's digits: ASCII only
            given[key] = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"drain.{key} must be a number of seconds") from None
        if not math.isfinite(given[key]) or given[key] <= 0:
            raise ConfigError(f"drain.{key} must be greater than 0")
    return DrainOptions(**given)


def drain_host(
    session: GuardSession,
    options: DrainOptions,
    progress: TerminalProgress | None = None,
    board: StatusBoard | None = None,
    *,
    front: str = "leaseguard drain",
    resume_hint: str = RESUME_HINT,
    stop: threading.Event | None = None,
    runners: Sequence[Runner] | None = None,
    act: Action | None = None,
    action: str = "drain",
    judge: Callable[[], Verdict] | None = None,
    label: str | None = None,
    started: float | None = None,
) -> DrainResult:
    """Drain one host, or a fleet (`runners`: every host's)."""
    parts: list[Part] = []
    stop = stop or threading.Event()
    if options.pause_cron_jobs:
        reach, access = session.connect_writable, options.intake()
        held: dict[str, Any] = dict(by=drain_identity(front), action=action, stop=stop)
        held.update(retry_s=options.resume_retry_s, resume_hint=resume_hint)
        parts.append(CronJobsPause(lambda: reach(access), options.pause_cron_jobs, **held))
    if options.pause_command:
        pause, resume = options.pause_command, options.resume_command
        parts += [CommandPause(r, pause, resume) for r in runners or [session.runner]]
    intake = Intakes(parts) if parts else None
    label = label or session.host
    observer = (board or options.board()).observer(label, intake)
    given: dict[str, Any] = dict(observer=observer, stop=stop, label=label, started=started)
    loop = Drainer(judge or session.judge, options.poll_s, options.deadline_s, progress, **given)
    return loop.run(intake, act)


def drain_each(
    session: GuardSession,
    options: DrainOptions,
    board: StatusBoard | None = None,
    *,
    stop: threading.Event | None = None,
    own: Mapping[str, GuardSession] | None = None,
    act: Callable[[GuardSession], Action | None] = lambda own: None,
    **kwargs: Any,
) -> dict[str, DrainResult]:
    """Each host of a judge_each session drained on one query per poll; `own`: its own intake."""
    assert session.each is not None
    board, stop = board or options.board(), stop or threading.Event()  # one for all hosts
    first_fresh = own is not None and bool(options.pause_command)
    judge_for = shared_poll(session, options.poll_s / 2, first_fresh=first_fresh)
    if own is None:  # the caller holds every intake: no host's thread pauses any (one session)
        options = replace(options, pause_cron_jobs=(), pause_command=(), resume_command=())
    hosts = sorted(session.each)
    mine = {host: session if own is None else own[host] for host in hosts}
    labels = {h: session.host_labels.get(h, h) for h in hosts}  # as its verdicts name them
    for label in labels.values():  # every host on the status board from the start, pending
        board.observer(label, database=session)
    # Hosts past map_waking's bound begin late: one fleet deadline, from now.
    shared: dict[str, Any] = dict(board=board, stop=stop, started=time.monotonic(), **kwargs)

    def drain(host: str) -> DrainResult:
        one, judge = mine[host], judge_for(host)
        return drain_host(one, options, judge=judge, act=act(one), label=labels[host], **shared)

    return dict(zip(hosts, map_waking(drain, hosts), strict=True))


def map_waking(work: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """`work` on threads, the caller waking every 0.2 s (signal handlers run on the main thread)."""
    with ThreadPoolExecutor(max_workers=max(min(len(items), 64), 1)) as pool:
        futures = [pool.submit(work, item) for item in items]
        while wait(futures, timeout=0.2).not_done:
            pass
        return [future.result() for future in futures]


def shared_poll(
    session: GuardSession, fresh_s: float, *, first_fresh: bool = False
) -> Callable[[str], Callable[[], Verdict]]:
    """Each host's judge on the fleet's one query: the last poll if it began after the host's
    previous answer and within `fresh_s`, else the next (the drains fall into step); with
    `first_fresh`, a host's first answer from a poll begun after its pause."""
    lock = threading.Lock()
    started, served = 0.0, dict[str, float]()  # the last poll's start, when each last took one
    outcome: dict[str, Verdict] | LeaseguardError | None = None

    def verdict(host: str) -> Verdict:
        nonlocal started, outcome
        asked = time.monotonic()
        with lock:
            now = time.monotonic()
            since = asked if first_fresh and host not in served else served.get(host, -1.0)
            if outcome is None or now - started > fresh_s or started <= since:
                try:
                    outcome = session.judge_each()
                except LeaseguardError as exc:  # every host that asks now gets this failure
                    outcome = exc
                started = now
            served[host] = time.monotonic()  # after the poll it took
            if isinstance(outcome, LeaseguardError):
                raise outcome
            return outcome[host]

    return lambda host: lambda: verdict(host)


def shared_failures(results: Mapping[str, DrainResult]) -> dict[LeaseguardError, list[str]]:
    """The failures that ended several hosts' drains at once (the fleet's poll): their hosts."""
    by_cause: dict[LeaseguardError, list[str]] = {}  # one failure, one key: by identity
    for host, result in results.items():
        if result.error is not None:
            by_cause.setdefault(result.error, []).append(host)
    return {cause: hosts for cause, hosts in by_cause.items() if len(hosts) > 1}


@contextmanager
def signals_set(stop: threading.Event, say: Callable[[str], None]) -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP set `stop` instead of raising. Only queued in the handler: an Event
    set there deadlocks when a second signal lands while the first holds its lock."""
    received: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def relay() -> None:
        while (signum := received.get()) is not None:
            name, again = signal.Signals(signum).name, stop.is_set()
            stop.set()  # before saying so: a closed stderr (a dead `| tee`) must not lose it
            said = f"{name} again: still resuming intake, then exiting" if again else None
            with suppress(Exception):
                say(said or f"{name}: stopping the drain and resuming intake")

    relaying = threading.Thread(target=relay, name="leaseguard-signals", daemon=True)
    relaying.start()
    previous: dict[signal.Signals, Any] = {}
    try:
        with suppress(ValueError):  # not the main thread: nothing to install
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                previous[sig] = signal.signal(sig, lambda signum, frame: received.put(signum))
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        received.put(None)  # after any signal queued before it: each is said
        relaying.join()


def configure_logging(*, verbose: bool = False) -> None:
    """UTC timeline lines on stderr from leaseguard's loggers; DEBUG (idle polls) if asked."""
    logger = logging.getLogger("leaseguard")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        formatter = logging.Formatter("%(asctime)sZ leaseguard %(message)s", "%Y-%m-%dT%H:%M:%S")
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        logger.propagate = False
        # psycopg's own warnings carry the driver's text and the connection's address.
        logging.getLogger("psycopg").addHandler(logging.NullHandler())
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
