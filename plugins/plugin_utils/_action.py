# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the one run() every leaseguard action plugin shares, and
what several share: the task's contract, its failure, the check of leaseguard_* variables,
a drain inside an Ansible worker (stopped by signals or a vanished controller, shown live)."""

from __future__ import annotations

import difflib
import logging
import os
import re
import threading
from contextlib import contextmanager, suppress
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

import yaml
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import module_spec
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import (
    LeaseguardError,
    api,
    require_leaseguard,
)

COLLECTION_ROOT = Path(__file__).resolve().parents[2]


class LeaseguardAction(ActionBase):
    """Validates the task's arguments against its module's spec and runs act(); a
    LeaseguardError fails the task naming the host and what failed (never a pass)."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    failure_what = "check"  # only a check's failure carries `decision: failed`
    needs_leaseguard = True  # False: runs without the leaseguard package (check_vars)
    module = ""  # plugins/modules/<module>.yml, whose DOCUMENTATION gives the spec
    role_variables = MappingProxyType({})  # option -> the role variable from_role_vars reads

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        module_spec(cls.module)  # parsed once in ansible-playbook's process, before it forks

    def act(self, args, host, task_vars):
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self.needs_leaseguard:
            require_leaseguard()
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        given = self._task.args
        if boolean(given.get("from_role_vars", False), strict=False):
            # Only the variables that are set are templated (a template per option and host
            # would cost the guard ~0.2 s).
            filled = {
                option: self._templar.template(task_vars[variable])
                for option, variable in self.role_variables.items()
                if option not in given and variable in task_vars
            }
            self._task.args = {**filled, **given}
        spec, options = module_spec(self.module)
        try:
            if self.needs_leaseguard:
                # Before the spec's float()/int(), which read any script's digits as numbers.
                api.refuse_non_ascii_numbers(self._task.args, spec)
            args = self.validate_argument_spec(spec, **options)[1]
            if args.get("check_vars"):  # check_vars' own check, first, in this same task
                checked = checked_variables(task_vars)
                if checked.get("failed"):
                    refused = {"decision": "failed"} if self.failure_what == "check" else {}
                    return {**result, **checked, **refused}
            result.update(self.act(args, host, task_vars))
        except LeaseguardError as exc:
            result.update(failure(exc, host, what=self.failure_what))
        return result


def failure(exc, host, what="check"):
    """A failed task result; a check's decision is 'failed', never 'proceed'."""
    result = {
        **api.failure_result(exc, host),
        "failed": True,
        "changed": False,
        "msg": f"leaseguard: {what} failed on {host} ({exc.kind}): {exc}",
    }
    if what != "check":
        del result["decision"]  # only a check decides
    return result


def contract_from(args):
    """The contract from the task's options (the core's top-level keys), without the None
    the argument spec fills in."""
    keys = {key.split(".")[0] for key in api.CONFIG_KEYS}
    return api.load_contract(
        {key: _without_none(args[key]) for key in keys if args.get(key) is not None}
    )


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def checked_variables(task_vars, allow=()):
    """The task's leaseguard_* variables, failed when one is unknown to the collection
    (Ansible silently drops a mistyped variable that nothing reads)."""
    known = known_variables() | set(allow)
    checked = sorted(name for name in task_vars if name.startswith("leaseguard_"))
    unknown = {}
    for name in checked:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            unknown[name] = close[0] if close else None
    result = {"changed": False, "checked": checked}
    if unknown:
        parts = [
            f"{name} (did you mean {near}?)" if near else f"{name} (no known name is close)"
            for name, near in sorted(unknown.items())
        ]
        msg = (
            f"leaseguard: unknown variable(s): {'; '.join(parts)}. Nothing was run. The known "
            "ones: ansible-doc -t role leaseguard.deploy.restart (or .guard, .migrate)"
        )
        result.update(failed=True, unknown=unknown, msg=msg)
    return result


@lru_cache(maxsize=1)
def known_variables():
    """Every leaseguard_* name the collection's roles and playbooks define, read or register."""
    names = set()
    for path in sorted(COLLECTION_ROOT.glob("roles/*/meta/argument_specs.yml")):
        for entry in (_load(path).get("argument_specs") or {}).values():
            names.update((entry or {}).get("options") or {})
    for folder in ("defaults", "vars"):
        for path in sorted(COLLECTION_ROOT.glob(f"roles/*/{folder}/*.yml")):
            names.update(_load(path))
    for path in sorted(COLLECTION_ROOT.glob("roles/*/tasks/*.yml")):
        names.update(_registered(_load(path)))
    for path in sorted(COLLECTION_ROOT.glob("playbooks/*.yml")):
        names.update(re.findall(r"\bleaseguard_[a-z0-9_]+\b", path.read_text(encoding="utf-8")))
    return frozenset(name for name in names if name.startswith("leaseguard_"))


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _registered(node):
    """Names a task file registers or sets as facts, at any depth (blocks, rescue, always)."""
    if isinstance(node, list):
        for item in node:
            yield from _registered(item)
    elif isinstance(node, dict):
        if isinstance(node.get("register"), str):
            yield node["register"]
        for key in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(node.get(key), dict):
                yield from node[key]
        for key in ("block", "rescue", "always"):
            yield from _registered(node.get(key))


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


known_variables()  # read once, in ansible-playbook's process: every forked worker inherits it
