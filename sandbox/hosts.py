"""Real "app hosts": a network namespace with sshd, optionally a container engine behind it and
a PostgreSQL that listens only on the host's own 127.0.0.1.

Root-only, Linux-only. :func:`open_app_host` starts one and tears it all down on exit; the
sandbox (:mod:`sandbox.detached`), the benchmarks and the pytest fixtures
(tests/support/hosts_fixtures.py) build on it.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fabric

from sandbox.netns import NetnsError, NetnsHost, free_port, wait_until_listening
from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.podman import PodmanEngine
from sandbox.sshd import SshServer

APP_PG_PORT = 5432
SSH_PORT = 22


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
