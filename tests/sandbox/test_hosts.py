"""Smoke tests of the host infrastructure: namespaces, sshd, podman, PostgreSQL behind SSH.

They prove what later tests of the tunnel, the runtime lookups, the Fabric tasks and the
molecule scenarios rely on, and that everything is cleaned up afterwards.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import paramiko
import psycopg
import pytest

from sandbox.hosts import AppHost
from sandbox.netns import (
    NetnsError,
    NetnsHost,
    descendants,
    free_port,
    pid_alive,
    pids_with_cmdline_containing,
    reap_stale_namespaces,
    wait_for_port,
)
from sandbox.podman import IMAGE, PodmanEngine
from sandbox.sshd import SshServer, write_ed25519_keypair

pytestmark = pytest.mark.integration


def _ssh(
    host: AppHost, *remote: str, known_hosts: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The OpenSSH client, driven only by the host's generated ssh_config."""
    argv = ["ssh", "-F", str(host.ssh_config_path)]
    if known_hosts is not None:
        argv += ["-o", f"UserKnownHostsFile={known_hosts}"]
    return subprocess.run(
        [*argv, host.alias, *remote], capture_output=True, text=True, timeout=30, check=False
    )


def _ip_netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _wait_for_a_process_in(namespace: str, timeout: float = 10.0) -> None:
    """Until `ip netns exec` has entered the namespace (a reap before that would miss it)."""
    deadline = time.monotonic() + timeout
    argv = ["ip", "netns", "pids", namespace]
    while not subprocess.run(argv, capture_output=True, text=True).stdout.split():
        assert time.monotonic() < deadline, f"no process entered {namespace} in {timeout}s"
        time.sleep(0.02)


def _ip_links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


class TestNetnsHost:
    def test_gives_processes_their_own_network_and_hostname(self) -> None:
        with NetnsHost.allocate(hostname="probe1") as host:
            links = host.run(["ip", "-o", "link"]).stdout
            assert {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()} == {
                "lo",
                host.veth_ns,
            }
            proc = host.popen(["hostname"], stdout=subprocess.PIPE)
            assert proc.communicate(timeout=10)[0].decode().strip() == "probe1"

    def test_removes_namespace_veth_and_processes_on_close(self) -> None:
        host = NetnsHost.allocate()
        sleeper = host.popen(["sleep", "300"])
        deadline = time.monotonic() + 10
        while host.pids() != [sleeper.pid]:  # popen returns before `ip netns exec` has entered
            assert time.monotonic() < deadline, host.pids()
            time.sleep(0.01)
        host.close()
        assert sleeper.wait(timeout=10) != 0
        assert host.name not in _ip_netns_list()
        assert host.veth_host not in _ip_links()
        host.close()  # idempotent

    def test_cleans_up_after_a_failed_start(self) -> None:
        host = NetnsHost(f"lgt-{os.getpid()}-broken", "10.213.255.1", "not-an-address")
        with pytest.raises(NetnsError, match="failed"):
            host.start()
        assert host.name not in _ip_netns_list()
        assert host.veth_host not in _ip_links()

    def test_reaps_namespaces_of_a_killed_session(self) -> None:
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = NetnsHost(f"lgt-{dead.pid}-stale0", "10.213.254.1", "10.213.254.2").start()
        orphan = stale.popen(["sleep", "300"])
        try:
            _wait_for_a_process_in(stale.name)
            assert stale.name in reap_stale_namespaces()
            assert orphan.wait(timeout=10) != 0
            assert stale.name not in _ip_netns_list()
        finally:
            stale.close()


class TestSshServer:
    def test_runs_commands_through_fabric_as_root(self, app_host: AppHost) -> None:
        with app_host.connection() as conn:
            result = conn.run("hostname; id -u", hide=True)
        assert result.stdout.split() == ["app1", "0"]

    def test_takes_a_plain_fabric_connection_with_key_filename(self, app_host: AppHost) -> None:
        import fabric

        conn = fabric.Connection(
            app_host.addr,
            port=app_host.port,
            user="root",
            connect_kwargs={"key_filename": str(app_host.client_key_path)},
            config=fabric.Config(overrides={"run": {"in_stream": False}}),
        )
        with conn:
            assert conn.run("echo ok", hide=True).stdout == "ok\n"

    def test_serves_the_openssh_client_from_its_ssh_config(self, app_host: AppHost) -> None:
        result = _ssh(app_host, "hostname")
        assert (result.returncode, result.stdout) == (0, "app1\n"), result.stderr

    def test_rejects_a_changed_host_key(self, app_host: AppHost, tmp_path: Path) -> None:
        other = write_ed25519_keypair(tmp_path / "impostor").split()
        wrong = tmp_path / "known_hosts_wrong"
        wrong.write_text(f"{app_host.addr} {other[0]} {other[1]}\n")

        conn = app_host.connection(strict=False)
        conn.client.load_host_keys(str(wrong))
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        with pytest.raises(paramiko.BadHostKeyException):
            conn.open()
        conn.close()

        result = _ssh(app_host, "true", known_hosts=wrong)
        assert result.returncode == 255
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr

    def test_rejects_an_unknown_host_key_under_reject_policy(
        self, app_host: AppHost, tmp_path: Path
    ) -> None:
        empty = tmp_path / "known_hosts_empty"
        empty.write_text("")
        conn = app_host.connection(strict=False)
        conn.client.load_host_keys(str(empty))
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
            conn.open()
        conn.close()

    def test_forwards_to_a_service_that_listens_only_on_the_hosts_loopback(
        self, app_host: AppHost, tmp_path: Path
    ) -> None:
        (tmp_path / "index.html").write_text("hello from app1")
        port = free_port()
        app_host.netns.popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        app_host.netns.wait_listening(port)
        assert not wait_for_port(app_host.addr, port, timeout=0.2)

        with app_host.tunnel(port) as local_port:
            url = f"http://127.0.0.1:{local_port}/index.html"
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.read() == b"hello from app1"

    def test_stops_with_its_sessions(self, tmp_path: Path) -> None:
        port = free_port()
        server = SshServer(tmp_path, "127.0.0.1", port).start()
        conn = server.connection()
        promise = conn.run("sleep 300", hide=True, asynchronous=True)
        deadline = time.monotonic() + 10
        while not any(_cmdline(p) == "sleep 300" for p in descendants(server.pid or 0)):
            assert time.monotonic() < deadline, "the remote sleep never started"
            time.sleep(0.01)
        session_pids = descendants(server.pid or 0)

        server.stop()

        assert [p for p in session_pids if pid_alive(p)] == []
        assert not wait_for_port("127.0.0.1", port, timeout=0.2)
        with contextlib.suppress(Exception):
            promise.join()
        conn.close()


class TestPodmanEngine:
    def test_shows_the_backend_to_the_docker_cli(
        self, podman_engine: PodmanEngine, backend
    ) -> None:
        assert "APP_TASK_TIMEOUT_S=3600" in backend["Config"]["Env"]
        started = datetime.fromisoformat(backend["State"]["StartedAt"])
        assert started.tzinfo is not None
        assert backend["State"]["Running"] is True
        assert backend["Config"]["Image"].endswith(IMAGE)

    def test_execs_in_the_backend(self, podman_engine: PodmanEngine, backend) -> None:
        echo = podman_engine.exec("backend", "sh", "-c", "echo $APP_TASK_TIMEOUT_S")
        assert echo.stdout == "3600\n"
        assert podman_engine.exec("backend", "printenv", "APP_TASK_TIMEOUT_S").stdout == "3600\n"
        missing = podman_engine.exec("backend", "printenv", "NOPE", check=False)
        assert (missing.returncode, missing.stdout) == (1, "")

    def test_moves_started_at_on_restart(self, podman_engine: PodmanEngine, backend) -> None:
        before = datetime.fromisoformat(backend["State"]["StartedAt"])
        podman_engine.restart("backend")
        after = datetime.fromisoformat(podman_engine.inspect("backend")["State"]["StartedAt"])
        assert after > before

    def test_runs_a_backend_without_the_variable(self, podman_engine: PodmanEngine) -> None:
        try:
            podman_engine.run_backend("bare", env={})
            env = podman_engine.inspect("bare")["Config"]["Env"]
            assert not [e for e in env if e.startswith("APP_TASK_TIMEOUT_S=")]
            assert (
                podman_engine.exec("bare", "printenv", "APP_TASK_TIMEOUT_S", check=False).returncode
                == 1
            )
        finally:
            podman_engine.remove("bare")

    def test_is_reachable_from_inside_a_namespace_and_over_ssh(
        self, app_host: AppHost, backend
    ) -> None:
        direct = app_host.run(
            ["docker", "inspect", "--format", "{{.State.StartedAt}}", "backend"],
            env=app_host.docker_env,
        )
        assert direct.stdout.strip() == backend["State"]["StartedAt"]
        with app_host.connection() as conn:
            over_ssh = conn.run("docker exec backend printenv APP_TASK_TIMEOUT_S", hide=True)
            podman = conn.run("podman inspect --format '{{.State.Running}}' backend", hide=True)
        assert over_ssh.stdout == "3600\n"
        assert podman.stdout == "true\n"

    def test_leaves_nothing_behind(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        base = tmp_path_factory.mktemp("podman-teardown")
        engine = PodmanEngine(base).start()
        try:
            engine.run_backend("backend")
            engine.exec("backend", "true")  # leaves a conmon behind for 300 s
            cgroup = engine.cgroup_parent
        finally:
            engine.stop()
        assert pids_with_cmdline_containing(str(base) + "/") == []
        assert not list(Path("/sys/fs/cgroup").glob(f"*/{cgroup}"))
        assert not (base / "root").exists()
        assert not (base / "podman.sock").exists()
        # Only what this engine could have caused; other sessions may change the rest.
        ours = ("NETAVARK", "CNI", "ip_forward", "/var/lib/", "/run/", "libpod")
        assert [c for c in engine.machine_changes() if any(m in c for m in ours)] == []

    def test_refuses_bridge_networking(self, podman_engine: PodmanEngine) -> None:
        # netavark/CNI would add firewall chains and enable ip_forward machine-wide.
        try:
            refused = podman_engine.docker(
                "run", "--detach", "--name", "bridged", IMAGE, check=False
            )
            assert refused.returncode != 0
            assert 'failed to find plugin "bridge"' in refused.stderr
        finally:
            podman_engine.remove("bridged")
        assert [c for c in podman_engine.machine_changes() if "ip_forward" in c] == []


class TestAppHostPg:
    def test_is_not_reachable_from_the_test_namespace(self, app_host_pg: AppHost) -> None:
        assert not wait_for_port(app_host_pg.addr, 5432, timeout=0.2)
        # Whatever may listen on the root namespace's 127.0.0.1:5432, it is not this server.
        with (
            contextlib.suppress(psycopg.OperationalError),
            psycopg.connect(
                host="127.0.0.1", port=5432, dbname="postgres", user="postgres", connect_timeout=2
            ) as conn,
        ):
            assert app_host_pg.pg is not None
            theirs = conn.execute("select system_identifier from pg_control_system()").fetchone()
            with app_host_pg.pg.connect(socket=True) as ours:
                mine = ours.execute("select system_identifier from pg_control_system()").fetchone()
            assert theirs != mine

    def test_is_reachable_through_the_ssh_tunnel(self, app_host_pg: AppHost, app_db) -> None:
        with app_db.connect(socket=True) as setup:
            setup.execute("create table marker (v text)")
            setup.execute("insert into marker values ('inside pg1')")
        with (
            app_host_pg.tunnel(5432) as local_port,
            psycopg.connect(
                host="127.0.0.1", port=local_port, dbname=app_db.name, user="guard_ro"
            ) as conn,
        ):
            row = conn.execute(
                "select v, inet_server_addr()::text, current_setting('port') from marker"
            ).fetchone()
        assert row == ("inside pg1", "127.0.0.1/32", "5432")
