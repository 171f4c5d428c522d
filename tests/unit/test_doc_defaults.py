"""The defaults `ansible-doc` shows are the core's, and the argument specs apply the same.

The core (`leaseguard.core.contract.Contract` and its nested lookups, `DrainOptions`) owns
every default; the modules' DOCUMENTATION repeats them so users see them, and the argument
specs (plugins/module_utils/_specs.py) are read from it. These tests keep the three equal,
and keep a default from hiding in a description again (`default: null` on screen).
A key a preset can set has no spec default, which would override the preset.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from leaseguard.core.contract import Contract, LeaseRule, RuntimeLookup, TaskTimeoutLookup
from leaseguard.core.presets import PRESETS
from leaseguard.orchestration.drain_run import DrainOptions

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build" / "collections"))  # the link `make collection-link` makes
MODULES = ("lease_guard", "task_timeout", "runtime_restart", "cron_budget", "check_vars")
FRAGMENT_PREFIX = "leaseguard.deploy."

# Options with no `default:` although their description names what happens when they are
# not set. A spec default would change behaviour: the front must still tell "not given"
# from "given", or the value comes from somewhere an argument spec cannot express.
EFFECTIVE_DEFAULT_IN_DESCRIPTION = {
    "dsn": "falls back to LEASEGUARD_DSN (env_fallback); a literal default would hide it",
    "db_host": "one DSN means one database: a default 127.0.0.1 would be an explicit db_host "
    "beside the DSN's own host and either replace it or refuse it (leaseguard.dsn)",
    "db_port": "as db_host: a default 5432 would conflict with a DSN naming another port",
    "db_name": "falls back to PGDATABASE (env_fallback)",
    "db_user": "falls back to PGUSER (env_fallback)",
    "db_password": "falls back to LEASEGUARD_DB_PASSWORD, then PGPASSWORD (env_fallback)",
    "cron_password": "falls back to LEASEGUARD_CRON_PASSWORD (env_fallback), then libpq's own",
    "schema": "not set means the connection's search_path, which has no literal value",
    "finished_statuses": "the core computes it (done, failed minus claimed and queued); an "
    "explicit list is also checked against an enum's labels, the default is not",
    "lease.expires_at_column": "not set selects the multiplier rule; there is no column",
    "deadline_s": "not set means the longest remaining lease seen at the start",
    "cron_database": "not set means the database of db_name",
}


def preset_keys() -> set[str]:
    """Every option path some preset sets (nested keys dotted, as documented)."""
    keys: set[str] = set()
    for layer in PRESETS.values():
        for key, value in layer.items():
            keys |= {f"{key}.{sub}" for sub in value} if isinstance(value, dict) else {key}
    return keys


# A spec default is an explicit value, and every explicit value overrides the preset's
# (leaseguard.core.contract.contract_from_mapping): so these keep their default in text.
PRESET_REASON = "a preset can set it; a spec default would override the preset's value"


def allow_listed() -> dict[str, str]:
    return {**dict.fromkeys(preset_keys(), PRESET_REASON), **EFFECTIVE_DEFAULT_IN_DESCRIPTION}


# Words with which a description states a default in text.
STATES_A_DEFAULT = re.compile(r"\(default\b|\bdefault V\(|\bdefaults to\b|\bif not set\b", re.I)


def _assigned_strings(path: Path) -> dict[str, str]:
    """Every `NAME = "..."` in a file, at module level or in a class (no import needed)."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _fragment_options(name: str) -> dict[str, Any]:
    file_name, _, variant = name.removeprefix(FRAGMENT_PREFIX).partition(".")
    strings = _assigned_strings(REPO / "plugins" / "doc_fragments" / f"{file_name}.py")
    return yaml.safe_load(strings[(variant or "documentation").upper()]).get("options") or {}


def documented_options(module: str) -> dict[str, Any]:
    """The module's options with its doc fragments merged, as ansible-doc shows them."""
    sidecar = REPO / "plugins" / "modules" / f"{module}.yml"
    doc = yaml.safe_load(sidecar.read_text(encoding="utf-8"))["DOCUMENTATION"]
    options: dict[str, Any] = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        options.update(_fragment_options(fragment))
    options.update(doc.get("options") or {})
    return options


def argument_spec(module: str) -> dict[str, Any]:
    specs = importlib.import_module(
        "ansible_collections.leaseguard.deploy.plugins.module_utils._specs"
    )
    result: dict[str, Any] = specs.module_spec(module)[0]
    return result


def walk(options: dict[str, Any], prefix: str = ""):
    """(dotted path, option) for every option and suboption."""
    for name, option in options.items():
        yield prefix + name, option
        yield from walk(option.get("suboptions") or option.get("options") or {}, f"{name}.")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _fields(instance: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(instance, f.name)) for f in dataclasses.fields(instance)}


def core_defaults() -> dict[str, Any]:
    """Every default the core owns, by the dotted option path the modules document."""
    contract = Contract()
    defaults = {
        key: value
        for key, value in _fields(contract).items()
        if key not in {"lease", "task_timeout", "runtime"}
    }
    for section, rule in (
        ("lease", LeaseRule()),
        ("task_timeout", TaskTimeoutLookup()),
        ("runtime", RuntimeLookup()),
    ):
        assert rule == getattr(contract, section)
        defaults.update({f"{section}.{key}": value for key, value in _fields(rule).items()})
    defaults.update(_fields(DrainOptions()))
    return defaults


@pytest.mark.parametrize("module", MODULES)
def test_every_documented_default_is_the_one_the_argument_spec_applies(module):
    documented = dict(walk(documented_options(module)))
    applied = dict(walk(argument_spec(module)))
    assert sorted(documented) == sorted(applied)
    differ = {
        path: (option.get("default"), applied[path].get("default"))
        for path, option in documented.items()
        if option.get("default") != applied[path].get("default")
    }
    assert differ == {}, "DOCUMENTATION default vs argument spec default"


def core_mismatches(module: str, core: dict[str, Any]) -> dict[str, Any]:
    """{option path: (documented, core's)} for every option the core owns that differs.

    An allow-listed option has no `default:`; its description must state the core's.
    """
    allowed = allow_listed()
    wrong: dict[str, Any] = {}
    for path, option in walk(documented_options(module)):
        if path not in core:
            continue  # a front-only option (wait, force, tunnel, ...): checked against the spec
        want = core[path]
        if path in allowed:
            if "default" in option:
                wrong[path] = (option["default"], f"no default: {allowed[path]}")
            elif want is not None and f"V({_rendered(want)})" not in _text(option):
                wrong[path] = ("not in the description", want)
        elif want is None:
            if "default" in option:
                wrong[path] = (option["default"], "no default in the core")
        elif option.get("default") != want:
            wrong[path] = (option.get("default"), want)
    return wrong


def _rendered(value: Any) -> str:
    """A value as the docs write it in V(...): lists as [a, b]."""
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


@pytest.mark.parametrize("module", MODULES)
def test_every_option_the_core_owns_documents_the_core_default(module):
    assert core_mismatches(module, core_defaults()) == {}, "documented default vs the core's"


def test_a_core_default_that_moves_without_the_docs_is_reported():
    moved = {
        **core_defaults(),
        "table": "other_runs",  # preset key: stated in the description
        "task_timeout.engine": "podman",  # in `default:`
        "deadline_s": 60.0,  # no default before
    }
    assert core_mismatches("lease_guard", moved) == {
        "table": ("not in the description", "other_runs"),
        "task_timeout.engine": ("docker", "podman"),
        "deadline_s": ("not in the description", 60.0),
    }


def test_cron_budgets_connect_timeout_default_is_the_contracts():
    options = documented_options("cron_budget")
    assert options["connect_timeout_s"]["default"] == Contract().connect_timeout_s


@pytest.mark.parametrize("module", MODULES)
def test_a_default_stated_only_in_a_description_is_allow_listed_with_a_reason(module):
    hidden = []
    for path, option in walk(documented_options(module)):
        stated = "default" not in option and STATES_A_DEFAULT.search(_text(option))
        if stated and path not in allow_listed():
            hidden.append(path)
    assert hidden == [], "put these defaults in `default:` (or allow-list them with a reason)"


def test_every_allow_listed_option_exists_has_no_default_and_says_what_happens_instead():
    seen: dict[str, list[dict[str, Any]]] = {}
    for module in MODULES:
        for path, option in walk(documented_options(module)):
            seen.setdefault(path, []).append(option)
    core = core_defaults()
    for path, reason in allow_listed().items():
        assert reason.strip()
        assert path in seen, f"allow-listed option {path} is documented nowhere"
        for option in seen[path]:
            assert "default" not in option, f"{path} is allow-listed but has a default"
            if path in EFFECTIVE_DEFAULT_IN_DESCRIPTION or core.get(path) is not None:
                assert STATES_A_DEFAULT.search(_text(option)), f"{path}: say what happens if unset"


def _text(option: dict[str, Any]) -> str:
    return " ".join(_as_list(option.get("description")))


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]
