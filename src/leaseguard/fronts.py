"""What every front (CLI, Fabric, Ansible) does the same way around a session."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from leaseguard.drain import Drainer, DrainResult, NoProgress, Progress
from leaseguard.drain_status import StatusBoard
from leaseguard.options import DrainOptions, build_intake
from leaseguard.session import GuardSession


def drain_host(
    session: GuardSession,
    options: DrainOptions,
    progress: Progress | None = None,
    board: StatusBoard | None = None,
) -> DrainResult:
    """Pause intake, wait for the live leases to end (lease-bounded), resume intake.

    `board`: the status/metrics files several hosts share; by default this host's own,
    from options.status_file / options.metrics_file.
    """
    intake = build_intake(options, session.connect_writable, session.runner)
    board = board or status_board(options)
    drainer = Drainer(
        session.judge,
        poll_s=options.poll_s,
        deadline_s=options.deadline_s,
        progress=progress or NoProgress(),
        observer=board.observer(session.host, intake),
    )
    return drainer.run(intake)


def status_board(options: DrainOptions) -> StatusBoard:
    """The drain's status/metrics files (none asked for: a board that writes nothing).

    Checked before anything is paused: a directory that cannot take the file is a usage
    error, not a drain that runs unobserved.
    """
    board = StatusBoard(options.status_file, options.metrics_file)
    board.check_writable()
    return board


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so `finally` blocks resume intake before the exit."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
