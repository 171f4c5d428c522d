"""`fab` loads leaseguard's tasks without the database driver: a fabfile that loads the
collection (`fab --list`, any other task) does not pay for psycopg. These check what a real
run loaded (sys.modules at exit).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# `fab ARGS` (from the repository: its fabfile.py), listing sys.modules when it exits.
FAB_AND_LIST_MODULES = """
import atexit, runpy, sys
atexit.register(lambda: print("MODULES", *sorted(sys.modules), file=sys.stderr))
sys.argv = ["fab", *sys.argv[1:]]
runpy.run_module("fabric", run_name="__main__", alter_sys=True)
"""


def run_fab(*args: str, script: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`fab ARGS` from the repository (its fabfile.py), through `script` if given."""
    python = [sys.executable, "-c", script] if script else [sys.executable, "-m", "fabric"]
    return subprocess.run(
        [*python, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def fab_modules(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`fab ARGS`'s run, and the modules it had loaded when it exited."""
    done = run_fab(*args, script=FAB_AND_LIST_MODULES)
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("MODULES ")]
    return done, set(line.split()[1:])


def loaded(modules: set[str], name: str) -> bool:
    return name in modules or any(module.startswith(f"{name}.") for module in modules)


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A local port nothing listens on (bound, never listening: the connect is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_listing_the_tasks_loads_no_database_driver() -> None:
    done, modules = fab_modules("--list")
    assert done.returncode == 0, done.stderr[-2000:]
    assert loaded(modules, "leaseguard.fabric.tasks")  # the detector saw the collection
    assert not loaded(modules, "psycopg")
    assert not loaded(modules, "leaseguard.orchestration.ssh_session")
    assert not loaded(modules, "leaseguard.fabric.hosts")


def test_a_guard_that_runs_loads_the_database_code_and_names_a_refused_host(refused_port) -> None:
    """A host that refuses the SSH connection is a failed check (exit 1), named."""
    done, modules = fab_modules("-H", f"root@127.0.0.1:{refused_port}", "guard")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "decision=failed error=TunnelError" in done.stdout
    assert f"127.0.0.1:{refused_port}) unreachable: cannot connect over SSH" in done.stdout
    assert loaded(modules, "psycopg")
    assert loaded(modules, "leaseguard.orchestration.ssh_session")


# `fab ARGS`, printing in order: the first SSH thread started and the first import of psycopg.
FAB_AND_ORDER = """
import atexit, runpy, sys, threading
seen = []
def note(event, args):
    if event == "import" and args[0] == "psycopg" and "psycopg" not in seen:
        seen.append("psycopg")
sys.addaudithook(note)
start = threading.Thread.start
def noted(thread):
    if thread.name == "leaseguard-ssh" and "thread" not in seen:
        seen.append("thread")
    start(thread)
threading.Thread.start = noted
atexit.register(lambda: print("ORDER", *seen, file=sys.stderr))
sys.argv = ["fab", *sys.argv[1:]]
runpy.run_module("fabric", run_name="__main__", alter_sys=True)
"""


def test_a_guard_starts_connecting_to_its_hosts_before_it_loads_psycopg(refused_port) -> None:
    """The SSH handshake runs while psycopg and the judging code load, not after them."""
    done = run_fab("-H", f"root@127.0.0.1:{refused_port}", "guard", script=FAB_AND_ORDER)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ORDER thread psycopg" in done.stderr


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that accepts the connection and never says a word (no SSH banner)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_a_refused_dsn_exits_2_without_waiting_for_a_host_still_connecting(silent_port) -> None:
    """The DSN is checked while the hosts connect; refused, the run ends at once (exit 2),
    never after the host's connect budget (-t 60) has run out."""
    began = time.monotonic()
    host, dsn = f"root@127.0.0.1:{silent_port}", "host=/run/postgresql dbname=app"
    done = run_fab("-t", "60", "-H", host, "guard", LEASEGUARD_DSN=dsn)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "socket directory" in done.stderr
    assert time.monotonic() - began < 30


def test_a_resume_that_cannot_reach_its_host_names_it_as_given(refused_port) -> None:
    host = f"root@127.0.0.1:{refused_port}"
    done = run_fab("-H", host, "resume", "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    assert json.loads(done.stdout)["host"] == host
