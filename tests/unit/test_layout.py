"""Which part may use which: nothing outside tests/ uses the test suite, and the sandbox
(sandbox/, a part of its own that `make demo`, molecule and the benchmarks run) needs no test
tools. `make lint`'s import-linter contracts (pyproject.toml) hold the Python packages to the
same rules; these also cover what import-linter cannot see: scripts, playbooks and `python -m`
command lines, and what an import really loads at run time.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE_TESTS = (
    "src",
    "sandbox",
    "benchmarks",
    "scripts",
    "plugins",
    "roles",
    "playbooks",
    "extensions",
    "meta",
    "fabfile.py",
    "Makefile",
    "pyproject.toml",
)
# `from tests...`, `import tests...`, `python -m tests.x` / `-m, tests.x` (YAML argv lists).
USES_TESTS = re.compile(r"\b(?:from|import)\s+tests(?:\.\w|\s+import\b|\s*$)|-m,?\s+[\"']?tests\.")
TEST_TOOLS = ("pytest", "_pytest", "hypothesis")


def _files_outside_tests() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *OUTSIDE_TESTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    return [REPO / name for name in listed if (REPO / name).is_file()]


def test_the_pattern_finds_each_way_of_using_the_tests() -> None:
    for line in (
        "from tests.support.netns import IP",
        "import tests.support.sandbox",
        "argv: [python, -m, tests.support.sandbox, start]",
        "python -m tests.support.sandbox stop --dir D",
    ):
        assert USES_TESTS.search(line), line
    for line in (
        "from sandbox.netns import IP",
        "the tests. Then",
        "tests/integration/x.py",
        "python -m sandbox start",
        "pytest tests/unit",
    ):
        assert not USES_TESTS.search(line), line


def test_nothing_outside_tests_uses_the_test_suite() -> None:
    files = _files_outside_tests()
    assert any(path.name == "demo.py" for path in files)  # the listing found the tree
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if USES_TESTS.search(line)
    ]
    assert offenders == []


def test_the_sandbox_and_its_users_load_no_test_tool() -> None:
    """Import every sandbox module, the demo and the benchmarks' machinery in a fresh
    interpreter, as molecule's create step does, and list the test tools that got loaded."""
    probe = (
        "import importlib, pkgutil, runpy, sys\n"
        "import sandbox\n"
        "for info in pkgutil.walk_packages(sandbox.__path__, 'sandbox.'):\n"
        "    importlib.import_module(info.name)\n"
        "import benchmarks.infra, benchmarks.run\n"
        "runpy.run_path('scripts/demo.py', run_name='demo')\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(TEST_TOOLS)!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


# The core opens no connection and starts no process (docs/architecture.md): import-linter sees
# psycopg as one package, so the names a connection needs are looked for here. psycopg.sql
# (composition), psycopg.conninfo, .pq and .abc are fine; so are psycopg's exception classes.
CORE = REPO / "src" / "leaseguard" / "core"
CONNECTING_NAMES = {"connect", "Connection", "AsyncConnection", "Cursor", "AsyncCursor"}
PROCESS_MODULES = {"socket", "subprocess", "select", "threading"}


def _reaches_out(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in PROCESS_MODULES:
                found.append(node.module)
            if node.module.split(".")[0] == "psycopg":
                names = [a.name for a in node.names if a.name in CONNECTING_NAMES]
                found += [f"{node.module}.{name}" for name in names]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in CONNECTING_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id == "psycopg"
        ):
            found.append(f"psycopg.{node.attr}")
    return found


def test_the_check_finds_a_connection_or_a_process() -> None:
    for source in (
        "import psycopg\nconn = psycopg.connect('')",
        "from psycopg import Connection",
        "import subprocess",
        "from socket import create_connection",
        "def f(c: psycopg.Cursor) -> None: ...",
    ):
        assert _reaches_out(ast.parse(source)), source
    for source in ("from psycopg import sql", "from psycopg.conninfo import make_conninfo"):
        assert not _reaches_out(ast.parse(source)), source


def test_the_core_opens_no_connection_and_starts_no_process() -> None:
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 10
    offenders = {
        str(path.relative_to(REPO)): found
        for path in modules
        if (found := _reaches_out(ast.parse(path.read_text())))
    }
    assert offenders == {}


def _leaseguard_imports(tree: ast.AST) -> list[str]:
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.append(node.module)
    return [m for m in modules if m == "leaseguard" or m.startswith("leaseguard.")]


def test_the_collection_reaches_the_package_only_through_its_public_api() -> None:
    """plugins/ import leaseguard.api and nothing else of the package, so its insides can
    change shape without breaking the collection; every name the api lists resolves."""
    import leaseguard.api

    plugins = sorted((REPO / "plugins").rglob("*.py"))
    assert len(plugins) > 10
    used = {
        f"{path.relative_to(REPO)}: {module}"
        for path in plugins
        for module in _leaseguard_imports(ast.parse(path.read_text()))
        if module != "leaseguard.api"
    }
    assert used == set()
    assert _leaseguard_imports(ast.parse("from leaseguard.adapters.db import connect"))
    for name in leaseguard.api.__all__:
        assert getattr(leaseguard.api, name) is not None, name
