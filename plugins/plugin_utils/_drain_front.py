# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: a drain run inside an Ansible worker.

Signals and a vanished controller stop it (its `finally` gives intake back), and its state
changes are shown as they happen.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager, suppress

from ansible.utils.display import Display

# Without the leaseguard package require_leaseguard() (plugin_utils._guard_front) fails
# every task before anything here runs.
with suppress(ImportError):
    from leaseguard.api import signals_set

display = Display()


RESUME_HINT = (
    "`ansible-playbook leaseguard.deploy.resume -i <inventory>` (or `leaseguard resume` with "
    "the same database options)"
)


@contextmanager
def stop_on_signals(label):
    """SIGINT/SIGTERM/SIGHUP stop the drain and its `finally` resumes intake; the worker says so.

    ansible-playbook forwards SIGINT and SIGTERM to its workers, whose own handler kills the
    whole worker at once (no `finally` runs), and on SIGTERM the controller process exits
    right away. So while a drain runs here, the signals only set `stop`; the drain's loop
    notices it within a poll and resumes intake. A controller that dies without forwarding
    anything (SIGHUP when its terminal closes, SIGKILL) leaves the worker orphaned: the worker
    notices its parent is gone and stops the same way, instead of draining on unseen. The
    message goes to the controller's stderr, opened before any signal (a worker's own stdio
    is /dev/null, and the controller may be gone by the time the resume is done).
    """
    stop = threading.Event()
    out = _controller_stderr()

    def say(message):
        line = f"leaseguard [{label}]: {message}"
        # The controller may be gone already (SIGTERM): the resume matters, not the message.
        with suppress(Exception):
            if out is not None:
                out.write(line + "\n")
                out.flush()
            else:
                display.display(line, stderr=True)

    done = threading.Event()
    watcher = threading.Thread(
        target=_stop_when_orphaned, args=(os.getppid(), stop, done, say), daemon=True
    )
    watcher.start()
    try:
        with signals_set(stop, say):
            yield stop, say
    finally:
        done.set()
        watcher.join()
        if out is not None:
            out.close()


def _stop_when_orphaned(parent, stop, done, say):
    """Set `stop` once the controller that forked this worker is gone."""
    while not done.wait(0.5):
        if os.getppid() != parent:
            say("ansible-playbook is gone: stopping the drain and resuming intake")
            stop.set()
            return


def _controller_stderr():
    """The ansible-playbook process's stderr, for messages that must outlive it."""
    try:
        return open(f"/proc/{os.getppid()}/fd/2", "a", encoding="utf-8")
    except OSError:
        return None


class DisplayedEvents(logging.Handler):
    """The drain's state changes, shown as they happen and kept for the task result.

    Idle polls log at DEBUG and never reach here: a long quiet wait prints nothing.
    """

    def __init__(self, label):
        super().__init__(logging.INFO)
        self.label = label
        self.lines = []

    def emit(self, record):
        line = record.getMessage()
        self.lines.append(line)
        display.display(f"leaseguard [{self.label}]: {line}")


@contextmanager
def drain_events(label):
    logger = logging.getLogger("leaseguard.drain")
    handler = DisplayedEvents(label)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
