"""What every front (CLI, Fabric, Ansible) does the same way around a session."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import Any

import psycopg

from leaseguard.adapters.pauses import drain_identity
from leaseguard.adapters.runtime import Runner
from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Verdict
from leaseguard.orchestration.drain import Action, Drainer, DrainResult, NoProgress, Progress
from leaseguard.orchestration.drain_options import DrainOptions, build_intake
from leaseguard.orchestration.drain_status import StatusBoard
from leaseguard.orchestration.session import GuardSession
from leaseguard.orchestration.shared_poll import SharedPoll


def drain_host(
    session: GuardSession,
    options: DrainOptions,
    progress: Progress | None = None,
    board: StatusBoard | None = None,
    *,
    front: str = "leaseguard drain",
    resume_hint: str | None = None,
    stop: threading.Event | None = None,
    runners: Sequence[Runner] | None = None,
    connect: Callable[[str | None], psycopg.Connection[Any]] | None = None,
    act: Action | None = None,
    action: str = "drain",
    judge: Callable[[], Verdict] | None = None,
) -> DrainResult:
    """Pause intake, wait for the live leases to end (lease-bounded), resume intake.

    `board`: the status/metrics files several hosts share; by default this host's own,
    from options.status_file / options.metrics_file. For a fleet, `session` is a
    `fleet_session`, `runners` every host's (their pause commands) and `connect` reaches the
    shared database through any host that still can. `act` runs once drained, with intake
    still held (`action` names it in the hold's record); intake is given back after it.
    `judge` replaces session.judge: one host of a fleet judged by the fleet's shared poll
    (leaseguard.orchestration.shared_poll).
    """
    by = drain_identity(front)
    session.pause_owner = by
    session.cron_database = options.cron_database
    session.cron_user, session.cron_password = options.cron_user, options.cron_password
    intake = build_intake(
        options,
        connect or session.connect_writable,
        runners or [session.runner],
        by=by,
        action=action,
        resume_hint=resume_hint,
    )
    board = board or status_board(options)
    drainer = Drainer(
        judge or session.judge,
        poll_s=options.poll_s,
        deadline_s=options.deadline_s,
        progress=progress or NoProgress(),
        observer=board.observer(session.host, intake),
        stop=stop or threading.Event(),
        label=session.host,
    )
    return drainer.run(intake, act)


def drain_each(
    session: GuardSession,
    options: DrainOptions,
    board: StatusBoard | None = None,
    *,
    stop: threading.Event | None = None,
) -> dict[str, DrainResult]:
    """Every host of a judge_each session drained by its own facts, all at once, their polls
    the fleet's one query per poll interval. Intake is the caller's to hold (each host's).

    A failure of the fleet's poll ends each host's drain with that same error object:
    `shared_failures` tells it apart from a host's own.
    """
    each = session.judged.each
    assert each is not None
    board = board or status_board(options)
    stop = stop or threading.Event()
    shared = SharedPoll(session, options.poll_s / 2)

    def drain(host: str) -> DrainResult:
        label = session.judged.host_labels.get(host, host)
        drainer = Drainer(
            shared.judge_for(host),
            poll_s=options.poll_s,
            deadline_s=options.deadline_s,
            observer=board.observer(label, None),
            stop=stop,
            label=label,
        )
        return drainer.run()

    hosts = sorted(each)
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        return dict(zip(hosts, pool.map(drain, hosts), strict=True))


def shared_failures(results: Mapping[str, DrainResult]) -> dict[int, list[str]]:
    """The failures that ended several hosts' drains at once (the fleet's one poll failed),
    each with its hosts; a host's own failure is not among them."""
    by_cause: dict[int, list[str]] = {}
    for host, result in results.items():
        if result.error is not None:
            by_cause.setdefault(id(result.error), []).append(host)
    return {cause: hosts for cause, hosts in by_cause.items() if len(hosts) > 1}


def status_board(options: DrainOptions) -> StatusBoard:
    """The drain's status/metrics files (none asked for: a board that writes nothing).

    Checked before anything is paused: a directory that cannot take the file is a usage
    error, not a drain that runs unobserved.
    """
    board = StatusBoard(options.status_file, options.metrics_file)
    board.check_writable()
    return board


def first_that_connects(
    connects: Sequence[Callable[[str | None], psycopg.Connection[Any]]],
) -> Callable[[str | None], psycopg.Connection[Any]]:
    """A connect that tries each path in turn: one host's dead tunnel must not strand intake."""

    def connect(dbname: str | None) -> psycopg.Connection[Any]:
        failure: LeaseguardError | None = None
        for attempt in connects:
            try:
                return attempt(dbname)
            except LeaseguardError as exc:
                failure = exc
        assert failure is not None
        raise failure

    return connect


# What ends a drain early: Ctrl-C, a kill, and a closed terminal (an ssh session dropped).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_set(stop: threading.Event, say: Callable[[str], None]) -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP set `stop` instead of raising: worker threads see it and wind down.

    The main thread keeps waiting for them, so every drain's `finally` (the resume) runs
    before the exit. A second signal only repeats that the resume is under way.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            say(f"{name} again: still resuming intake, then exiting")
        else:
            say(f"{name}: stopping the drain and resuming intake")
        stop.set()

    with _handling(STOP_SIGNALS, handler):
        yield


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM and SIGHUP (a closed terminal) like Ctrl-C, so `finally` blocks resume
    intake before the exit."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    with _handling((signal.SIGTERM, signal.SIGHUP), interrupt):
        yield


@contextmanager
def _handling(
    signals: tuple[signal.Signals, ...], handler: Callable[[int, FrameType | None], None]
) -> Iterator[None]:
    """`handler` for these signals during the block, the previous handlers after it."""
    try:
        previous = {sig: signal.signal(sig, handler) for sig in signals}
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def configure_logging(*, verbose: bool = False) -> None:
    """Timeline-style UTC log lines on stderr; DEBUG (idle polls) only when asked.

    Only leaseguard's own loggers: the root logger is left alone, so paramiko's connection
    chatter ("Connected", "Authentication successful") stays out of the timeline.
    """
    logger = logging.getLogger("leaseguard")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        formatter = logging.Formatter(
            "%(asctime)sZ leaseguard %(message)s", datefmt="%Y-%m-%dT%H:%M:%S"
        )
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
