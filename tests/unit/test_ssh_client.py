"""Each client trusts its own host's keys from known_hosts, and nothing else."""

from types import SimpleNamespace

import paramiko
from fabric import Config, Connection

from leaseguard.adapters.ssh import SshOptions, make_connection, trust_known_hosts

KEY_A = paramiko.RSAKey.generate(1024)
KEY_B = paramiko.RSAKey.generate(1024)


def _line(name, key):
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def _connection(host, port):
    client = paramiko.SSHClient()
    return SimpleNamespace(host=host, port=port, client=client, ssh_config={}, gateway=None)


def test_an_edited_file_is_read_again(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(_line("10.0.0.1", KEY_A))
    first = _connection("10.0.0.1", 22)
    trust_known_hosts(first, str(path))
    path.write_text(_line("10.0.0.1", KEY_B))
    second = _connection("10.0.0.1", 22)
    trust_known_hosts(second, str(path))
    assert second.client.get_host_keys().lookup("10.0.0.1")["ssh-rsa"] == KEY_B


def test_a_client_trusts_its_hosts_key_by_port_and_nothing_else(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(_line("[10.0.0.1]:2222", KEY_A) + _line("10.0.0.2", KEY_B))
    on_port = _connection("10.0.0.1", 2222)
    trust_known_hosts(on_port, str(path))
    keys = on_port.client.get_host_keys()
    assert keys.lookup("[10.0.0.1]:2222")["ssh-rsa"] == KEY_A
    assert keys.lookup("10.0.0.2") is None  # another host's entry is not copied
    unknown = _connection("10.0.0.1", 22)  # the same address on another port is unknown
    trust_known_hosts(unknown, str(path))
    assert len(unknown.client.get_host_keys()) == 0


def test_a_gateway_from_the_fabric_config_refuses_unknown_host_keys_too():
    """Fabric's own default for a config's `gateway` Connection is to add unknown keys."""
    jump = Connection("jump.example")
    connection = make_connection("app.example", SshOptions(), Config(overrides={"gateway": jump}))
    assert connection.gateway.host == "jump.example"
    assert isinstance(connection.gateway.client._policy, paramiko.RejectPolicy)
    assert isinstance(connection.client._policy, paramiko.RejectPolicy)
