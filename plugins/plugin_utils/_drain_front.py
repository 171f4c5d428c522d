# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: a drain inside an Ansible worker, stopped by signals or a
vanished controller (its `finally` gives intake back), its state changes shown live."""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager, suppress

from ansible.utils.display import Display
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import api

display = Display()
RESUME_HINT = (
    "`ansible-playbook leaseguard.deploy.resume -i <inventory>` (or `leaseguard resume` with "
    "the same database options)"
)


@contextmanager
def stop_on_signals(label):
    """SIGINT/SIGTERM/SIGHUP, or the controller's exit, set `stop`: the drain gives intake back.

    A worker's own handler would kill it at once (no `finally`), and a controller gone without
    forwarding a signal (SIGHUP, SIGKILL) leaves the worker orphaned, which it notices.
    Messages go to the controller's stderr, opened first (a worker's stdio is /dev/null).
    """
    stop, done = threading.Event(), threading.Event()
    try:
        out = open(f"/proc/{os.getppid()}/fd/2", "a", encoding="utf-8")  # noqa: SIM115
    except OSError:
        out = None

    def say(message):
        line = f"leaseguard [{label}]: {message}"
        with suppress(Exception):  # the controller may be gone: the resume matters, not this
            if out is None:
                display.display(line, stderr=True)
            else:
                out.write(line + "\n")
                out.flush()

    def stop_when_orphaned(parent):
        while not done.wait(0.5):
            if os.getppid() != parent:
                say("ansible-playbook is gone: stopping the drain and resuming intake")
                stop.set()
                return

    watcher = threading.Thread(target=stop_when_orphaned, args=(os.getppid(),), daemon=True)
    try:
        watcher.start()
        with api.signals_set(stop, say):
            yield stop, say
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        if out is not None:
            out.close()


class _Displayed(logging.Handler):
    """Shows each drain line (INFO and up: idle polls never) and keeps it for the result."""

    def __init__(self, label):
        super().__init__(logging.INFO)
        self.label, self.lines = label, []

    def emit(self, record):
        self.lines.append(record.getMessage())
        display.display(f"leaseguard [{self.label}]: {self.lines[-1]}")


@contextmanager
def drain_events(label):
    """The drain's log lines, shown live and collected into the yielded list."""
    logger = logging.getLogger("leaseguard.drain")
    handler, previous = _Displayed(label), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
