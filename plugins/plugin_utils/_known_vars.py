# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: which leaseguard_* variables the collection knows.

Ansible silently drops a mistyped variable that nothing reads. The known names are read from
the collection's own files, no second list to keep in step; only PyYAML is needed.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from pathlib import Path

import yaml

PREFIX = "leaseguard_"
COLLECTION_ROOT = Path(__file__).resolve().parents[2]
_NAME_RE = re.compile(r"\bleaseguard_[a-z0-9_]+\b")


def checked_variables(task_vars, allow=()):
    """The task's leaseguard_* variables, and a failure naming every unknown one (or None)."""
    known = known_variables() | set(allow)
    checked = sorted(name for name in task_vars if name.startswith(PREFIX))
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
        names.update(_NAME_RE.findall(path.read_text(encoding="utf-8")))
    return frozenset(name for name in names if name.startswith(PREFIX))


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


known_variables()  # read once, in ansible-playbook's process: every forked worker inherits it
