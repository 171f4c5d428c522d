"""pytest fixtures for real "app hosts" (:mod:`sandbox.hosts`): a network namespace with sshd,
a container engine, and optionally a PostgreSQL that listens only on the host's own 127.0.0.1.

Register with ``pytest_plugins = ["tests.support.hosts_fixtures"]`` in tests/conftest.py.

Fixtures (all root-only, Linux-only):

* ``podman_engine`` (session): a private podman API service with the test image imported.
* ``backend`` (function): container ``backend`` with ``APP_TASK_TIMEOUT_S=3600`` in
  ``podman_engine``; removed after the test.
* ``app_host`` (function): :class:`AppHost` ``app1`` - namespace + sshd on ``<addr>:22``,
  whose SSH sessions see ``podman_engine`` as their Docker daemon.
* ``app_host_factory`` (function): ``make(alias, *, engine=..., pg=False)`` for more hosts.
* ``app_host_pg`` (session): :class:`AppHost` ``pg1`` whose ``127.0.0.1:5432`` is a real
  PostgreSQL (``.pg`` is the ``PgCluster``); reachable from the tests only through SSH.
* ``app_db`` (function): a fresh database in ``app_host_pg``'s cluster.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandbox.hosts import AppHost, open_app_host
from sandbox.podman import PodmanEngine
from tests.support.pg_fixtures import PgDatabase, fresh_database

#: Startup durations (seconds) measured by the fixtures, reported with ``-v``.
TIMINGS: dict[str, list[float]] = {}


def _timed(label: str, start: float) -> None:
    TIMINGS.setdefault(label, []).append(time.monotonic() - start)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def podman_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanEngine]:
    """The session's private podman API service, with ``leaseguard-test/backend`` imported."""
    t0 = time.monotonic()
    with PodmanEngine(tmp_path_factory.mktemp("podman")) as engine:
        _timed("podman_engine", t0)
        yield engine


@pytest.fixture
def backend(podman_engine: PodmanEngine) -> Iterator[dict[str, Any]]:
    """Container ``backend`` (``APP_TASK_TIMEOUT_S=3600``) running for this test; its inspect."""
    t0 = time.monotonic()
    podman_engine.run_backend("backend")
    _timed("backend", t0)
    try:
        yield podman_engine.inspect("backend")
    finally:
        podman_engine.remove("backend")


@pytest.fixture
def app_host_factory(
    tmp_path_factory: pytest.TempPathFactory, podman_engine: PodmanEngine
) -> Iterator[Callable[..., AppHost]]:
    """``make(alias="app1", *, engine=podman_engine, pg=False) -> AppHost``; all torn down."""
    with contextlib.ExitStack() as stack:

        def make(
            alias: str = "app1", *, engine: PodmanEngine | None = podman_engine, pg: bool = False
        ) -> AppHost:
            base = tmp_path_factory.mktemp(f"host-{alias}")
            host = stack.enter_context(open_app_host(base, alias, engine=engine, pg=pg))
            for label, seconds in host.timings.items():
                TIMINGS.setdefault(label, []).append(seconds)
            return host

        yield make


@pytest.fixture
def app_host(app_host_factory: Callable[..., AppHost]) -> AppHost:
    """Host ``app1``: namespace + sshd on port 22; its sessions use ``podman_engine``."""
    return app_host_factory("app1")


@pytest.fixture(scope="session")
def app_host_pg(
    tmp_path_factory: pytest.TempPathFactory, podman_engine: PodmanEngine
) -> Iterator[AppHost]:
    """Host ``pg1`` whose ``127.0.0.1:5432`` is a real PostgreSQL, reachable only over SSH."""
    base = tmp_path_factory.mktemp("host-pg1")
    with open_app_host(base, "pg1", engine=podman_engine, pg=True) as host:
        for label, seconds in host.timings.items():
            TIMINGS.setdefault(label, []).append(seconds)
        yield host


@pytest.fixture
def app_db(app_host_pg: AppHost) -> Iterator[PgDatabase]:
    """A fresh database ``t_<hex>`` in ``app_host_pg``'s cluster, dropped after the test.

    Set it up through ``app_db.connect(socket=True)`` (the unix socket is on the shared
    filesystem); the code under test reaches it as ``127.0.0.1:5432`` through an SSH tunnel.
    """
    assert app_host_pg.pg is not None
    with fresh_database(app_host_pg.pg) as database:
        yield database


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    """With ``-v``, report how long each piece of host infrastructure took to start."""
    if not TIMINGS or config.getoption("verbose") < 1:
        return
    terminalreporter.section("host infrastructure startup")
    for label, values in TIMINGS.items():
        terminalreporter.write_line(
            f"{label:14s} n={len(values):3d} mean={sum(values) / len(values):.3f}s "
            f"max={max(values):.3f}s"
        )
