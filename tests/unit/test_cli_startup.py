"""`leaseguard` starts with only what the command needs (issue 16): `--help` and `--version`
load no psycopg, `check` no Fabric, paramiko, invoke, jinja2, Ansible nor the budgets code.

The import-linter contracts (pyproject.toml) check the static imports; these check what a
run really loaded (sys.modules at exit). The real `check` against a database:
tests/integration/test_cli_startup.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from leaseguard.cli.main import COMMANDS, build_parser

# What the base install (no extras) lacks, and the budgets machinery `check` never uses.
NOT_FOR_CHECK = (
    "fabric",
    "paramiko",
    "invoke",
    "jinja2",
    "ansible",
    "leaseguard.core.budgets.config",
    "leaseguard.core.budgets.planning",
    "leaseguard.adapters.budgets",
    "leaseguard.cli.commands",
)
# Parsers a command loads only when given a file to read (--config, --facts-file).
ONLY_WITH_A_FILE = ("yaml",)


# `python -m leaseguard ARGS` that prints sys.modules at exit. Not `-X importtime`: it does not
# report modules imported through importlib.import_module, as the CLI's subcommands are.
RUN_AND_LIST_MODULES = """
import atexit, runpy, sys
atexit.register(lambda: print("MODULES", *sorted(sys.modules), file=sys.stderr))
sys.argv = ["leaseguard", *sys.argv[1:]]
runpy.run_module("leaseguard", run_name="__main__", alter_sys=True)
"""


def imported_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules `python -m leaseguard ARGS` had loaded when it exited (exit status 0)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_MODULES, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return modules_in(done.stderr)


def modules_in(stderr: str) -> set[str]:
    """The names on the `MODULES ...` line RUN_AND_LIST_MODULES prints."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("MODULES ")]
    return set(line.split()[1:])


def loaded(modules: set[str], name: str) -> bool:
    return name in modules or any(module.startswith(f"{name}.") for module in modules)


def test_help_and_version_load_no_database_driver_nor_any_front_library() -> None:
    for args in (["--help"], ["--version"]):
        modules = imported_by(*args)
        assert loaded(modules, "leaseguard.cli.main")  # the parse saw the CLI: it can fail
        assert not loaded(modules, "psycopg"), args
        assert [name for name in NOT_FOR_CHECK if loaded(modules, name)] == [], args
        assert not loaded(modules, "yaml"), args
        # Nor the contract, verdict and fleet dataclasses: building them costs start-up.
        light = ("leaseguard.core.contract", "leaseguard.core.verdict", "leaseguard.core.fleet")
        assert [name for name in light if loaded(modules, name)] == [], args


def test_check_help_loads_nothing_check_does_not_use() -> None:
    modules = imported_by("check", "--help")
    assert [name for name in NOT_FOR_CHECK if loaded(modules, name)] == []
    assert loaded(modules, "leaseguard.core.presets")  # its options: the detector sees them


def test_budgets_loads_its_own_machinery_only_when_named() -> None:
    """The other direction: the detector sees the budgets code when the command needs it."""
    modules = imported_by("budgets", "--help")
    assert loaded(modules, "leaseguard.core.budgets.planning")
    assert loaded(modules, "leaseguard.cli.commands")


def test_the_top_level_help_is_the_same_whether_commands_are_loaded_or_not() -> None:
    """Each one-line help in COMMANDS is the one its parser gives (no drift between them)."""
    assert build_parser(in_full=set()).format_help() == build_parser().format_help()
    assert list(COMMANDS) == ["check", "drain", "resume", "budgets", "index-sql", "status"]


def test_a_named_command_gets_its_options_and_the_others_only_their_name() -> None:
    parser = build_parser(in_full={"status"})
    assert parser.parse_args(["status", "/tmp/x.json", "--json"]).json is True
    with pytest.raises(SystemExit):
        parser.parse_args(["check", "--dsn", "x"])  # check was not loaded: --dsn is unknown
