"""pytest fixtures for real "app hosts": a network namespace with sshd, a container engine, and
optionally a PostgreSQL that listens only on the host's own 127.0.0.1.

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

:class:`AppHost` and :func:`open_app_host` are plain Python and usable outside pytest.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fabric
import pytest

from tests.support.netns import NetnsError, NetnsHost, free_port, wait_until_listening
from tests.support.pg_fixtures import PgDatabase, fresh_database
from tests.support.pgcluster import PgCluster
from tests.support.podman import PodmanEngine
from tests.support.sshd import SshServer

# PgCluster's directory must be traversable by the postgres OS user; pytest's basetemp is 0700.
PG_BASE_DIR = Path("/tmp")
APP_PG_PORT = 5432
SSH_PORT = 22

#: Startup durations (seconds) measured by the fixtures, reported with ``-v``.
TIMINGS: dict[str, list[float]] = {}


def _timed(label: str, start: float) -> None:
    TIMINGS.setdefault(label, []).append(time.monotonic() - start)


@dataclass
class AppHost:
    """One test "host": a namespace reachable from the tests at :attr:`addr`, with sshd on it.

    The SSH user is root, authenticated by :attr:`client_key_path`; the host key is pinned in
    :attr:`known_hosts_path`. Inside the namespace ``hostname`` prints :attr:`alias`.
    """

    alias: str
    netns: NetnsHost
    sshd: SshServer
    engine: PodmanEngine | None = None
    pg: PgCluster | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def addr(self) -> str:
        return self.netns.addr_ns

    @property
    def port(self) -> int:
        return self.sshd.port

    @property
    def known_hosts_path(self) -> Path:
        return self.sshd.known_hosts_path

    @property
    def client_key_path(self) -> Path:
        return self.sshd.client_key_path

    @property
    def ssh_config_path(self) -> Path:
        return self.sshd.ssh_config_path

    @property
    def docker_env(self) -> dict[str, str]:
        """Environment for running the ``docker`` CLI against this host's engine from here."""
        if self.engine is None:
            raise RuntimeError(f"app host {self.alias} has no container engine")
        return self.engine.docker_env

    @property
    def session_env(self) -> dict[str, str]:
        """Variables every SSH session on this host gets (the engine's DOCKER_HOST etc.)."""
        return dict(self.sshd.session_env)

    def connection(self, *, strict: bool = True, **kwargs: Any) -> fabric.Connection:
        """A ``fabric.Connection`` as root with the pinned host key (RejectPolicy)."""
        return self.sshd.connection(strict=strict, **kwargs)

    def run(self, cmd: list[str], **kwargs: Any) -> Any:
        """Run ``cmd`` directly inside the namespace (not over SSH)."""
        return self.netns.run(cmd, **kwargs)

    @contextlib.contextmanager
    def tunnel(
        self, remote_port: int, remote_host: str = "127.0.0.1", conn: Any = None
    ) -> Iterator[int]:
        """``Connection.forward_local`` to ``remote_host:remote_port`` on this host.

        Yields the local port on 127.0.0.1 once it is listening (``forward_local`` returns
        before its listener thread has bound).
        """
        own = conn is None
        conn = self.connection() if own else conn
        local_port = free_port()
        try:
            with conn.forward_local(
                local_port, remote_port, remote_host=remote_host, local_host="127.0.0.1"
            ):
                if not wait_until_listening("127.0.0.1", local_port, timeout=10):
                    raise NetnsError(f"tunnel to {self.alias}:{remote_port} never listened")
                yield local_port
        finally:
            if own:
                conn.close()

    def ansible_host_vars(self) -> dict[str, Any]:
        """Inventory variables for Ansible's ssh connection to this host (strict host keys)."""
        return {
            "ansible_host": self.addr,
            "ansible_port": self.port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.client_key_path),
            "ansible_ssh_common_args": shlex.join(
                [
                    "-o",
                    f"UserKnownHostsFile={self.known_hosts_path}",
                    "-o",
                    "GlobalKnownHostsFile=/dev/null",
                    "-o",
                    "StrictHostKeyChecking=yes",
                    "-o",
                    "IdentitiesOnly=yes",
                ]
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
        }


@contextlib.contextmanager
def open_app_host(
    base_dir: str | Path,
    alias: str = "app1",
    *,
    engine: PodmanEngine | None = None,
    pg: bool = False,
    pg_base_dir: str | Path = PG_BASE_DIR,
) -> Iterator[AppHost]:
    """Start an :class:`AppHost`; everything is torn down on exit, also after a failure.

    :param base_dir: directory for sshd's files (keys, configs, log).
    :param engine: container engine the host's SSH sessions use (``DOCKER_HOST`` etc.).
    :param pg: also start a PostgreSQL inside the namespace on ``127.0.0.1:5432``.
    """
    with contextlib.ExitStack() as stack:
        timings: dict[str, float] = {}
        t0 = time.monotonic()
        netns = NetnsHost.allocate(hostname=alias)
        stack.callback(netns.close)
        timings["netns"] = time.monotonic() - t0

        t0 = time.monotonic()
        sshd = SshServer(
            base_dir,
            netns.addr_ns,
            SSH_PORT,
            netns.command_prefix(),
            alias=alias,
            session_env=engine.session_env if engine is not None else None,
        )
        stack.callback(sshd.stop)
        sshd.start()
        timings["sshd"] = time.monotonic() - t0

        cluster = None
        if pg:
            t0 = time.monotonic()
            cluster = PgCluster(pg_base_dir, port=APP_PG_PORT, command_prefix=netns.prefix)
            stack.callback(cluster.stop)
            cluster.start()
            timings["postgres"] = time.monotonic() - t0

        yield AppHost(alias, netns, sshd, engine=engine, pg=cluster, timings=timings)


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
