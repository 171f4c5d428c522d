"""Test-suite wiring: fixtures live in tests/support/*_fixtures.py and are registered here."""

import glob
import signal
import time

import pytest

from sandbox.netns import pids_with_cmdline_containing

# A suite started in the background by a shell (`nohup make test &`) inherits SIGINT ignored,
# and so would every drain it starts: the Ctrl-C tests would then wait for drains that never
# see their signal. Installing Python's handler here lets the children start with SIGINT at
# its default, as from a terminal; a drain that inherits SIGINT ignored keeps it so (POSIX).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Order matters: hosts_fixtures imports pg_fixtures.
pytest_plugins = ["tests.support.pg_fixtures", "tests.support.hosts_fixtures"]

# Fixtures that start more than PostgreSQL (sandbox hosts, podman): a test that uses one is
# marked `hosts`, and `make test-fast` leaves it out.
HOST_FIXTURES = frozenset(
    {"podman_engine", "backend", "app_host_factory", "app_host", "app_host_pg", "app_db"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HOST_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.hosts)


# Sandboxes (molecule's /tmp/lgm-*, the demo's /tmp/lgdemo-*) hold throw-away SSH private keys:
# the run that created one must remove it. Only directories that appear during this session
# count, so other runs' sandboxes on the same machine are not blamed for existing before, and
# only those no process uses any more: a concurrent run's live sandbox is not a leftover.
LEFTOVER_GLOBS = ("/tmp/lgm-*", "/tmp/lgdemo-*")
LEFTOVER_GRACE_S = 30.0
_BEFORE = pytest.StashKey[set[str]]()


def _sandbox_dirs() -> set[str]:
    return {path for pattern in LEFTOVER_GLOBS for path in glob.glob(pattern)}


def _abandoned(paths: set[str]) -> set[str]:
    return {path for path in paths if not pids_with_cmdline_containing(path + "/")}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = _sandbox_dirs()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    # A concurrent run's sandbox may appear during ours; give it time to be torn down.
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    left = _abandoned(_sandbox_dirs() - before)
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = _abandoned(_sandbox_dirs() - before)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"leftover sandbox directories: {', '.join(sorted(left))}", red=True
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
