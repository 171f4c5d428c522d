"""A host started in the background (leaseguard.orchestration.host_start) under real faults.

`fab guard` starts its hosts (SSH connection, then the lookups' exec) before it reads the
rest of its settings. A host that refuses the connection fails both steps with the same
named error; a host that never answers keeps neither the guard's usage error nor the
process's exit waiting for it. Real sockets: a port nothing listens on, and a listener that
accepts the TCP connection and never sends an SSH banner.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from leaseguard.adapters.ssh import SshOptions, make_connection
from leaseguard.core.contract import Contract
from leaseguard.core.errors import TunnelError
from leaseguard.orchestration.host_start import start_host

REPO = Path(__file__).resolve().parents[2]
NEVER_S = 300  # a connect timeout no test waits for


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A local port nothing listens on (bound, never listening: the connect is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listener takes the TCP connection and never says anything."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def started(port: int):
    options = SshOptions(connect_timeout_s=NEVER_S)
    return start_host(make_connection(f"root@127.0.0.1:{port}", options), Contract())


def test_a_refused_connection_fails_the_open_and_the_lookup_with_the_same_named_error(
    refused_port,
):
    start = started(refused_port)
    expected = re.escape(f"127.0.0.1:{refused_port}) unreachable: cannot connect over SSH")
    with pytest.raises(TunnelError, match=expected):
        start.opened.result(timeout=60)
    assert start.lookup.exception(timeout=60) is start.opened.exception()


def test_a_lookup_nobody_takes_over_is_cancelled_before_it_runs(silent_port):
    start = started(silent_port)
    assert start.lookup.cancel()  # still waiting for the host's banner: never runs
    start.connection.close()
    assert not start.opened.done()


def test_a_process_does_not_wait_at_exit_for_a_host_still_connecting(silent_port):
    code = (
        "from leaseguard.adapters.ssh import SshOptions, make_connection\n"
        "from leaseguard.core.contract import Contract\n"
        "from leaseguard.orchestration.host_start import start_host\n"
        f"options = SshOptions(connect_timeout_s={NEVER_S})\n"
        f"start = start_host(make_connection('root@127.0.0.1:{silent_port}', options), "
        "Contract())\n"
        "print('started')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (0, "started\n"), done.stderr[-2000:]


def test_a_usage_error_found_after_the_hosts_started_does_not_wait_for_them(silent_port, tmp_path):
    """`fab guard` starts its hosts, then refuses the DSN: exit 2 at once, no verdict."""
    config = tmp_path / "fabric.yaml"
    section = {
        "connect_timeout_s": NEVER_S,
        "connection": {"dsn": "host=/run/postgresql dbname=app"},
    }
    config.write_text(yaml.safe_dump({"leaseguard": section}))
    host = f"root@127.0.0.1:{silent_port}"
    done = subprocess.run(
        [sys.executable, "-m", "fabric", "-f", str(config), "-H", host, "guard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "socket directory" in done.stderr
    assert "decision=" not in done.stdout
    assert "Traceback" not in done.stderr
