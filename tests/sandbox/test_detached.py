"""The detachable sandbox (sandbox/detached.py), checked only from outside, as molecule's
create/destroy playbooks and ``make demo`` use it: through its CLI, its files, real SSH,
the docker CLI and libpq.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fabric
import paramiko
import psycopg
import pytest
import yaml

from sandbox.detached import MODULE, REPO_ROOT
from sandbox.netns import (
    NetnsHost,
    free_port,
    leftover_namespaces,
    pid_alive,
    pids_with_cmdline_containing,
    wait_until_listening,
)
from sandbox.subprocess_env import clean_env

pytestmark = pytest.mark.integration

VENV_BIN = REPO_ROOT / ".venv" / "bin"


def sandbox_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args],
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def load_state(d: Path) -> dict[str, Any]:
    return dict(json.loads((d / "sandbox.json").read_text()))


@contextlib.contextmanager
def running_sandbox(d: Path, *options: str) -> Iterator[dict[str, Any]]:
    """``start``, yield sandbox.json, and ``stop`` even if the test failed half-way."""
    started = sandbox_cli("start", "--dir", str(d), *options)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == str(d / "inventory.yml")
    try:
        yield load_state(d)
    finally:
        sandbox_cli("stop", "--dir", str(d))


def machine_state() -> dict[str, str]:
    """What a container engine could change machine-wide (here: firewall, forwarding)."""
    iptables = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    return {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "engine_chains": "\n".join(
            line for line in iptables.splitlines() if "NETAVARK" in line or "CNI" in line
        ),
    }


def ansible_ping(inventory: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "ansible-home"
    control = tmp_path / "cp"
    control.mkdir()
    env = clean_env(
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_HOME=str(home),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(control),
    )
    return subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", str(inventory), "app", "-m", "ansible.builtin.ping"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ssh(host: dict[str, Any]) -> fabric.Connection:
    """A Fabric connection built only from sandbox.json, with the pinned host key."""
    conn = fabric.Connection(
        host["addr"],
        user=host["user"],
        port=host["port"],
        connect_timeout=10,
        connect_kwargs={
            "key_filename": host["client_key_path"],
            "look_for_keys": False,
            "allow_agent": False,
        },
        config=fabric.Config(overrides={"run": {"in_stream": False}}),
    )
    conn.client.load_host_keys(host["known_hosts_path"])
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return conn


@contextlib.contextmanager
def guard_through(host: dict[str, Any], guard: dict[str, Any], **over: Any) -> Iterator[Any]:
    """A guard_pw connection to the host's database address, through an SSH tunnel."""
    with ssh(host) as conn:
        local_port = free_port()
        with conn.forward_local(local_port, guard["port"], remote_host=guard["host"]):
            assert wait_until_listening("127.0.0.1", local_port)
            params = {k: guard[k] for k in ("dbname", "user", "password")} | over
            with psycopg.connect(host="127.0.0.1", port=local_port, **params) as db:
                yield db


def assert_docker_backend(state: dict[str, Any], name: str) -> None:
    env = {**clean_env(), **state["docker_env"]}
    out = subprocess.run(
        ["docker", "inspect", "--type", "container", name],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    (info,) = json.loads(out)
    assert info["State"]["Running"] is True
    assert "APP_TASK_TIMEOUT_S=3600" in info["Config"]["Env"]


def assert_nothing_left(d: Path, state: dict[str, Any], before: dict[str, str]) -> None:
    assert not pid_alive(state["pid"])
    deadline = time.monotonic() + 5  # ansible's ssh mux masters exit once sshd is gone
    while pids_with_cmdline_containing(str(d)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_with_cmdline_containing(str(d)) == []
    assert pids_with_cmdline_containing(state["pg"]["root"]) == []
    assert not Path(state["pg"]["root"]).exists()
    names = {h["netns"] for h in state["hosts"]}
    assert names.isdisjoint(leftover_namespaces())
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not [n for n in names if NetnsHost(n, "", "").veth_host in links]
    assert not (d / "podman" / "podman.sock").exists()
    assert machine_state() == before
    assert sorted(p.name for p in d.iterdir() if p.is_file()) == ["sandbox.log"]


def test_a_two_host_lifecycle_with_one_shared_database(tmp_path: Path) -> None:
    """Start, start again, use each way the hosts are used, stop, stop again.

    Molecule's scenarios start the one-host default (container `backend`) every run."""
    d = tmp_path / "sb"
    before = machine_state()
    with running_sandbox(d, "--hosts", "app1,app2", "--database", "demo") as state:
        app1, app2 = state["hosts"]
        assert (d / "ready").exists()
        assert [app1["alias"], app2["alias"]] == ["app1", "app2"]
        assert [app1["container"], app2["container"]] == ["backend-app1", "backend-app2"]
        inventory = yaml.safe_load((d / "inventory.yml").read_text())
        app = inventory["all"]["children"]["app"]
        assert app["hosts"]["app1"]["ansible_host"] == app1["addr"]
        assert app["hosts"]["app2"]["leaseguard_task_timeout"]["container"] == "backend-app2"
        assert app["vars"]["leaseguard_db_host"] == "127.0.0.1"
        assert state["pg"]["guard"]["password"] not in (d / "inventory.yml").read_text()
        assert "PGPASSWORD=" in (d / "env.sh").read_text()

        ping = ansible_ping(d / "inventory.yml", tmp_path)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert ping.stdout.count('"ping": "pong"') == 2

        assert_docker_backend(state, "backend-app2")
        with ssh(app2) as conn:  # the SSH session sees the engine as its docker daemon
            over_ssh = conn.run("docker inspect --type container backend-app2", hide=True).stdout
            assert json.loads(over_ssh)[0]["State"]["Running"] is True

        with psycopg.connect(state["pg"]["superuser_dsn"], autocommit=True) as admin:
            admin.execute("INSERT INTO execution_runs (id, status) VALUES (7, 'open')")
        guard = state["pg"]["guard"]
        with psycopg.connect(
            host=state["pg"]["socket_dir"],
            port=state["pg"]["port"],
            dbname=guard["dbname"],
            user=guard["user"],
        ) as db:
            assert db.execute("SELECT id FROM execution_runs").fetchall() == [(7,)]
        with guard_through(app1, guard) as db:
            row = db.execute("SELECT current_user, host(inet_client_addr())").fetchone()
            assert row == ("guard_pw", "127.0.0.1")
        # app2 has no server of its own: its loopback :5432 leads to app1's, password and all.
        with guard_through(app2, guard) as db:
            row = db.execute("SELECT current_database(), host(inet_client_addr())").fetchone()
            assert row == ("demo", "127.0.0.1")
            assert db.execute("SELECT id FROM execution_runs").fetchall() == [(7,)]
        with pytest.raises(psycopg.OperationalError), guard_through(app2, guard, password="no"):
            pass

        again = sandbox_cli("start", "--dir", str(d))
        assert again.returncode == 0 and again.stdout.strip() == str(d / "inventory.yml")
        assert load_state(d)["pid"] == state["pid"]

        stopped = sandbox_cli("stop", "--dir", str(d))
        assert stopped.returncode == 0, stopped.stderr
    assert_nothing_left(d, state, before)
    assert "stopped podman engine" in (d / "sandbox.log").read_text()
    nothing = sandbox_cli("stop", "--dir", str(d))
    assert nothing.returncode == 0 and "no sandbox running" in nothing.stderr


def test_start_reports_a_failed_startup_and_leaves_nothing(tmp_path: Path) -> None:
    d = tmp_path / "sb"
    before = machine_state()
    failed = sandbox_cli("start", "--dir", str(d), "--database", "postgres")  # already exists
    assert failed.returncode == 1
    assert "DuplicateDatabase" in failed.stderr
    assert pids_with_cmdline_containing(str(d)) == []
    serve_pid = re.search(r"sandbox\[(\d+)\]", (d / "sandbox.log").read_text())
    assert serve_pid is not None
    assert not [n for n in leftover_namespaces() if n.startswith(f"lgt-{serve_pid[1]}-")]
    assert machine_state() == before
    assert sorted(p.name for p in d.iterdir() if p.is_file()) == ["sandbox.log"]
