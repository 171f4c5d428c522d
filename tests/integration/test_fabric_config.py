"""Fabric config the Fabric way, against a real sshd: `connect_kwargs`, `fab -t` and
`timeouts.connect`, ssh_config ProxyJump chains, `FABRIC_LEASEGUARD_*` variables, and `-j`
(`--json`) alike in every task.

The hosts judge with a fixed task timeout and no runtime lookup, so no container is needed.
"""

import contextlib
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from sandbox.runs_table import create_runs_table
from sandbox.sshd import SshServer
from tests.support.fab_run import run_fab
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXED = {"task_timeout": {"source": "fixed", "value_s": 3600}, "runtime": {"source": "none"}}


@pytest.fixture
def runs(app_db):
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
    return app_db


@pytest.fixture
def fabric_yaml(app_host_pg, runs, tmp_path):
    """Writes a fabric.yaml (the leaseguard section, plus any top-level Fabric keys)."""

    def write(leaseguard=None, **fabric):
        section = {
            "connection": {
                "dsn": f"dbname={runs.name} user=postgres",
                "known_hosts": str(app_host_pg.known_hosts_path),
            },
            **FIXED,
            **(leaseguard or {}),
        }
        path = tmp_path / "fabric.yaml"
        path.write_text(yaml.safe_dump({"leaseguard": section, **fabric}))
        return str(path)

    return write


def claim(db, row_id, status="running"):
    with db.connect(socket=True) as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (%s, %s, now())",
            (row_id, status),
        )


# -- connect_kwargs -------------------------------------------------------------------------


@pytest.fixture
def passphrase_key(app_host_pg, tmp_path):
    """A key protected by a passphrase, authorized on the host for this test only."""
    key = tmp_path / "id_protected"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "open-sesame", "-f", str(key)], check=True
    )
    authorized = app_host_pg.sshd.authorized_keys_path
    before = authorized.read_text()
    authorized.write_text(before + key.with_suffix(".pub").read_text())
    try:
        yield key
    finally:
        authorized.write_text(before)


def test_connect_kwargs_key_and_passphrase_from_fabric_yaml_are_used(
    fabric_yaml, runs, app_host_pg, passphrase_key
):
    claim(runs, 1)
    host = f"root@{app_host_pg.addr}"
    kwargs = {"key_filename": str(passphrase_key), "look_for_keys": False, "allow_agent": False}
    with_passphrase = fabric_yaml(connect_kwargs={**kwargs, "passphrase": "open-sesame"})
    done = run_fab("-f", with_passphrase, "-H", host, "guard")
    assert done.returncode == 75, done.stdout + done.stderr
    without = run_fab("-f", fabric_yaml(connect_kwargs=kwargs), "-H", host, "guard")
    assert without.returncode == 1, without.stdout + without.stderr
    assert f"host {app_host_pg.addr} ({app_host_pg.addr}:22)" in without.stdout
    assert "open-sesame" not in without.stdout + without.stderr


def test_a_missing_key_file_is_named_as_such_not_as_an_unreachable_host(
    fabric_yaml, runs, app_host_pg, tmp_path
):
    kwargs = {"key_filename": str(tmp_path / "no-such-key"), "look_for_keys": False}
    done = run_fab("-f", fabric_yaml(connect_kwargs=kwargs), "-H", app_host_pg.addr, "guard")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a private key file for SSH cannot be read here (FileNotFoundError)" in done.stdout
    assert "unreachable" not in done.stdout


@pytest.fixture
def agent(app_host_pg, tmp_path):
    """An ssh-agent holding the host's client key; its socket path."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        assert wait_until(sock.exists, timeout_s=10)
        env = {"SSH_AUTH_SOCK": str(sock)}
        subprocess.run(
            ["ssh-add", "-q", str(app_host_pg.client_key_path)],
            env=env,
            check=True,
            capture_output=True,
        )
        yield env
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_allow_agent_from_connect_kwargs_decides_whether_the_agent_is_asked(
    fabric_yaml, runs, app_host_pg, agent
):
    claim(runs, 1)
    host = f"root@{app_host_pg.addr}"
    asked = fabric_yaml(connect_kwargs={"allow_agent": True, "look_for_keys": False})
    done = run_fab("-f", asked, "-H", host, "guard", env=agent)
    assert done.returncode == 75, done.stdout + done.stderr
    refused = fabric_yaml(connect_kwargs={"allow_agent": False, "look_for_keys": False})
    done = run_fab("-f", refused, "-H", host, "guard", env=agent)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "decision=failed error=TunnelError" in done.stdout


# -- connect timeouts -----------------------------------------------------------------------


@pytest.fixture
def silent_port():
    """A port that accepts TCP connections and never says a word (no SSH banner)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for sock in held:
            sock.close()


@pytest.mark.parametrize(
    ("argv", "fabric", "env"),
    [
        (["-t", "2"], {}, {}),
        ([], {"timeouts": {"connect": 2}}, {}),
        ([], {}, {"FABRIC_TIMEOUTS_CONNECT": "2"}),
        (["-t", "2"], {"timeouts": {"connect": 30}}, {}),
    ],
    ids=["fab-t", "timeouts.connect", "FABRIC_TIMEOUTS_CONNECT", "fab-t-wins"],
)
def test_the_connect_timeout_fabric_users_set_bounds_a_host_that_never_answers(
    fabric_yaml, silent_port, argv, fabric, env
):
    config = fabric_yaml(**fabric)
    start = time.monotonic()
    done = run_fab("-f", config, *argv, "-H", f"root@127.0.0.1:{silent_port}", "guard", env=env)
    elapsed = time.monotonic() - start
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"host 127.0.0.1 (127.0.0.1:{silent_port})" in done.stdout
    # The default (10 s) would wait 10 s for the banner; fab itself starts in ~1-2 s.
    assert 2 <= elapsed < 8, (elapsed, done.stdout)


def test_a_jump_host_that_never_answers_is_bounded_by_the_same_timeout(
    fabric_yaml, silent_port, app_host_pg, tmp_path
):
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        f"Host lg-target\n  HostName {app_host_pg.addr}\n  ProxyJump root@127.0.0.1:{silent_port}\n"
    )
    start = time.monotonic()
    done = run_fab(
        "-f", fabric_yaml(), "-S", str(ssh_config), "-t", "2", "-H", "lg-target", "guard"
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 1, done.stdout + done.stderr
    assert "lg-target" in done.stdout
    assert 2 <= elapsed < 8, (elapsed, done.stdout)


# -- ssh_config ProxyJump --------------------------------------------------------------------


@pytest.fixture
def second_sshd(app_host_pg, tmp_path):
    """Another sshd in the host's namespace, on port 2222, taking the same client key."""
    server = SshServer(
        tmp_path / "sshd2222",
        app_host_pg.addr,
        2222,
        app_host_pg.netns.command_prefix(),
        alias="jump2",
        session_env=app_host_pg.session_env,
    )
    with server:
        server.authorized_keys_path.write_text(
            Path(str(app_host_pg.client_key_path) + ".pub").read_text()
        )
        yield server


def test_a_proxyjump_chain_from_ssh_config_is_walked_in_order(
    fabric_yaml, runs, app_host_pg, second_sshd, tmp_path
):
    """`ProxyJump lg-jump1,lg-jump2`: jump1 (port 22) first, jump2 (2222) through it.

    Each sshd logs where its connections come from: the controller reaches the namespace
    from its veth peer, a hop inside the namespace from the namespace's own address.
    """
    claim(runs, 1)
    addr, outside = app_host_pg.addr, app_host_pg.netns.addr_host
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        f"Host lg-target\n  HostName {addr}\n  User root\n  ProxyJump lg-jump1,lg-jump2\n"
        f"Host lg-jump1\n  HostName {addr}\n  User root\n"
        f"Host lg-jump2\n  HostName {addr}\n  Port 2222\n  User root\n"
    )
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        app_host_pg.known_hosts_path.read_text() + second_sshd.known_hosts_path.read_text()
    )
    connection = {"dsn": f"dbname={runs.name} user=postgres", "known_hosts": str(known_hosts)}
    config = fabric_yaml({"connection": connection})
    key = str(app_host_pg.client_key_path)
    done = run_fab("-f", config, "-S", str(ssh_config), "-i", key, "-H", "lg-target", "guard")
    assert done.returncode == 75, done.stdout + done.stderr
    second = second_sshd.log_path.read_text()
    # (A connection from outside that sends nothing is the fixture's readiness probe.)
    assert f"Accepted publickey for root from {addr} port" in second, second
    assert f"Accepted publickey for root from {outside} port" not in second, second


def test_a_host_named_by_its_ssh_config_alias_is_named_so_in_every_line(
    fabric_yaml, runs, app_host_pg, tmp_path
):
    """`-H lg-app` (an ssh_config alias): the verdicts, the drain and its status file name
    lg-app, as the failures and the drain's own object do, not the HostName it resolves to."""
    claim(runs, 1)
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host lg-app\n  HostName {app_host_pg.addr}\n  User root\n")
    key, status_file = str(app_host_pg.client_key_path), tmp_path / "drain.json"
    argv = ["-f", fabric_yaml(), "-S", str(ssh_config), "-i", key, "-H", "lg-app"]
    guard = run_fab(*argv, "guard")
    assert guard.returncode == 75, guard.stdout + guard.stderr
    assert " host=lg-app decision=defer " in guard.stdout, guard.stdout
    guard = run_fab(*argv, "guard", "-j")
    assert [o["host"] for o in json.loads(guard.stdout)] == ["lg-app"]
    drain = run_fab(*argv, "drain", "-j", "--deadline-s", "1", "--status-file", str(status_file))
    assert drain.returncode == 75, drain.stdout + drain.stderr
    (result,) = json_lines(drain.stdout)
    assert (result["host"], result["verdict"]["host"]) == ("lg-app", "lg-app")
    assert " drain host=lg-app start live=1" in drain.stderr, drain.stderr
    snapshot = json.loads(status_file.read_text())
    assert snapshot["hosts"] == ["lg-app"]
    assert app_host_pg.addr not in guard.stdout + drain.stdout + status_file.read_text()


# -- FABRIC_LEASEGUARD_* ---------------------------------------------------------------------


def test_fabric_leaseguard_variables_set_leaseguard_keys(app_host_pg, runs, tmp_path):
    """No leaseguard section at all: the DSN, the contract and the host-key file from the
    environment, as Fabric users set `FABRIC_RUN_ECHO=1`."""
    claim(runs, 1, status="busy")
    env = {
        "FABRIC_LEASEGUARD_CONNECTION_DSN": f"dbname={runs.name} user=postgres",
        "FABRIC_LEASEGUARD_CONNECTION_KNOWN_HOSTS": str(app_host_pg.known_hosts_path),
        "FABRIC_LEASEGUARD_TASK_TIMEOUT_SOURCE": "fixed",
        "FABRIC_LEASEGUARD_TASK_TIMEOUT_VALUE_S": "3600",
        "FABRIC_LEASEGUARD_RUNTIME_SOURCE": "none",
        "FABRIC_LEASEGUARD_FINISHED_STATUSES": "done",
    }
    empty = tmp_path / "fabric.yaml"
    empty.write_text("{}\n")
    argv = ("-f", str(empty), "-i", str(app_host_pg.client_key_path))
    host = f"root@{app_host_pg.addr}"
    busy = {**env, "FABRIC_LEASEGUARD_CLAIMED_STATUSES": "busy"}
    done = run_fab(*argv, "-H", host, "guard", env=busy)
    assert done.returncode == 75, done.stdout + done.stderr
    assert "decision=defer live=1" in done.stdout
    # Without the variable, "busy" is a status the contract does not name: fail closed.
    done = run_fab(*argv, "-H", host, "guard", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error=UnclassifiedStatus" in done.stdout
    assert "busy" in done.stdout


def test_a_fabric_leaseguard_flag_variable_reads_true_and_false(app_host_pg, runs, tmp_path):
    config = tmp_path / "fabric.yaml"
    config.write_text(
        yaml.safe_dump(
            {"leaseguard": {"connection": {"dsn": f"dbname={runs.name} user=postgres"}, **FIXED}}
        )
    )
    argv = ("-f", str(config), "-i", str(app_host_pg.client_key_path))
    host = f"root@{app_host_pg.addr}"
    unknown = {"FABRIC_LEASEGUARD_CONNECTION_KNOWN_HOSTS": "/dev/null"}
    variable = "FABRIC_LEASEGUARD_CONNECTION_ACCEPT_UNKNOWN_HOST_KEYS"
    refused = run_fab(*argv, "-H", host, "guard", env={**unknown, variable: "false"})
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "host key is not in known_hosts" in refused.stdout
    accepted = run_fab(*argv, "-H", host, "guard", env={**unknown, variable: "true"})
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


@pytest.mark.parametrize(
    ("section", "nearest"),
    [
        ({"conection": {}}, "'connection'"),
        ({"claimd_statuses": ["running"]}, "'claimed_statuses'"),
        ({"drain": {"pol_s": 1}}, "'drain.poll_s'"),
    ],
)
def test_a_misspelt_leaseguard_key_is_refused_naming_the_nearest(
    fabric_yaml, app_host_pg, section, nearest
):
    config = fabric_yaml(section)
    key = str(app_host_pg.client_key_path)
    done = run_fab("-f", config, "-i", key, "-H", f"root@{app_host_pg.addr}", "guard")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"did you mean {nearest}?" in done.stderr, done.stderr


@pytest.mark.parametrize("in_yaml", [False, True])
def test_a_false_variable_over_a_yaml_flag_never_accepts_unknown_host_keys(
    app_host_pg, runs, tmp_path, in_yaml
):
    """Fabric casts a variable over a YAML boolean as "non-empty is true": `false` must still
    read false (here the user's ~/.fabric.yaml, which the variable overrides)."""
    section = {
        "connection": {
            "dsn": f"dbname={runs.name} user=postgres",
            "known_hosts": "/dev/null",
            "accept_unknown_host_keys": in_yaml,
        },
        **FIXED,
    }
    (tmp_path / ".fabric.yaml").write_text(yaml.safe_dump({"leaseguard": section}))
    argv = ("-i", str(app_host_pg.client_key_path), "-H", f"root@{app_host_pg.addr}", "guard")
    variable = "FABRIC_LEASEGUARD_CONNECTION_ACCEPT_UNKNOWN_HOST_KEYS"
    refused = run_fab(*argv, env={"HOME": str(tmp_path), variable: "false"})
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "host key is not in known_hosts" in refused.stdout
    accepted = run_fab(*argv, env={"HOME": str(tmp_path), variable: "true"})
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


@pytest.mark.parametrize(
    ("section", "env"),
    [
        ({"connection": "postgresql://u:hunter2@db/app"}, {}),
        ({"drain": "hunter2"}, {}),
        ({"claimed_statuses": ["running"]}, {"FABRIC_LEASEGUARD_CLAIMED_STATUSES": "hunter2"}),
    ],
    ids=["connection-a-string", "drain-a-string", "variable-over-a-list"],
)
def test_a_config_fabric_cannot_merge_is_a_usage_error_quoting_no_value(
    app_host_pg, tmp_path, section, env
):
    config = tmp_path / "fabric.yaml"
    config.write_text(yaml.safe_dump({"leaseguard": section}))
    argv = ("-f", str(config), "-i", str(app_host_pg.client_key_path))
    done = run_fab(*argv, "-H", f"root@{app_host_pg.addr}", "guard", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Fabric could not merge its config" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


# -- -j / --json, and a host that is down ----------------------------------------------------


def json_lines(text):
    """`fab drain --json`: one complete object per line (a host's, or the fleet's)."""
    return [json.loads(line) for line in text.splitlines()]


def test_dash_j_prints_json_in_every_task_one_object_per_host(fabric_yaml, runs, app_host_pg):
    claim(runs, 1)
    config = fabric_yaml({"drain": {"cron_database": "postgres"}})
    key = str(app_host_pg.client_key_path)
    up, down = f"root@{app_host_pg.addr}", f"root@{app_host_pg.addr}:2"
    hosts = f"{up},{down}"
    guard = run_fab("-f", config, "-i", key, "-H", hosts, "guard", "-j")
    drain = run_fab("-f", config, "-i", key, "-H", hosts, "drain", "-j", "--deadline-s", "1")
    for done, parse in ((guard, json.loads), (drain, json_lines)):
        assert done.returncode == 1, done.stdout + done.stderr
        objects = parse(done.stdout)
        # (guard names a judged host by its address, a failed one as given to -H)
        assert [o["host"].rpartition("@")[2] for o in objects] == [up[5:], down[5:]]
        assert objects[1]["decision"] == "failed"
        message = objects[1]["error"]["message"]
        assert f"host {app_host_pg.addr} ({app_host_pg.addr}:2) unreachable" in message
        assert "run with -H excluding it" in message
    resume = run_fab("-f", config, "-i", key, "-H", up, "resume", "-j")
    assert resume.returncode == 0, resume.stdout + resume.stderr
    assert isinstance(json.loads(resume.stdout), dict)
