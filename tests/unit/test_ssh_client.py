"""known_hosts parsed once per content; each client trusts its own host's keys only."""

import os
from types import SimpleNamespace

import paramiko

from leaseguard.adapters.ssh_client import AeadFirstTransport, parsed_known_hosts, trust_known_hosts

KEY_A = paramiko.RSAKey.generate(1024)
KEY_B = paramiko.RSAKey.generate(1024)


def _line(name, key):
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def _connection(host, port):
    return SimpleNamespace(host=host, port=port, client=paramiko.SSHClient(), ssh_config={})


def test_a_file_is_parsed_once_and_again_when_it_changes(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(_line("10.0.0.1", KEY_A))
    first = parsed_known_hosts((path,))
    assert parsed_known_hosts((path,)) is first
    path.write_text(_line("10.0.0.1", KEY_B))
    os.utime(path, ns=(1, 1))  # a new mtime even within the clock's resolution
    second = parsed_known_hosts((path,))
    assert second is not first
    assert second.lookup("10.0.0.1")["ssh-rsa"] == KEY_B


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


def test_gcm_is_preferred_and_every_other_cipher_stays_negotiable():
    preferred = AeadFirstTransport._preferred_ciphers
    assert preferred[0] == "aes128-gcm@openssh.com"
    assert sorted(preferred) == sorted(paramiko.Transport._preferred_ciphers)
