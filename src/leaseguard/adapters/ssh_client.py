"""The paramiko client's own settings: the host keys it may trust, the ciphers it prefers.

Both are about the controller's CPU per host, which `fab -H ... guard` pays once per host.
Fabric's Connection reads no known_hosts, and paramiko's own loading
(SSHClient.load_host_keys) parses every line of every file for every connection: ~25 ms per
host with a 50-host known_hosts. Here the files are parsed once per content and each client
gets its own host's entries only.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

if TYPE_CHECKING:  # Fabric itself is imported by adapters.ssh, which names the extra if missing
    from fabric import Connection

SYSTEM_KNOWN_HOSTS = "~/.ssh/known_hosts"


class AeadFirstTransport(paramiko.Transport):  # type: ignore[misc]
    """paramiko's Transport, preferring AES-GCM over its default AES-CTR + HMAC-SHA2.

    With CTR + HMAC, paramiko checks every packet's MAC in a pure-Python byte loop
    (util.constant_time_bytes_eq), ~2.6 ms of the controller's CPU per `fab guard` host.
    GCM authenticates in the cipher (OpenSSH has offered it since 6.2); a server without it
    still negotiates the rest of the list, in paramiko's order.
    """

    _preferred_ciphers = (
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        *(name for name in paramiko.Transport._preferred_ciphers if "-gcm@" not in name),
    )


_lock = threading.Lock()
_parsed: dict[tuple[tuple[str, int, int], ...], paramiko.HostKeys] = {}


def trust_known_hosts(connection: Connection, known_hosts: str | None) -> None:
    """Give the connection's client the keys known_hosts lists for its host.

    The files: the system one, ssh_config's UserKnownHostsFile, then `known_hosts` (like
    ssh's UserKnownHostsFile: one or more paths). paramiko's precedence is kept: the system
    file's entry if it has one, else the other files'.
    """
    name = host_key_name(connection)
    system = parsed_known_hosts((Path(SYSTEM_KNOWN_HOSTS).expanduser(),))
    entry = system.lookup(name) or parsed_known_hosts(
        tuple(_known_hosts_files(connection, known_hosts))
    ).lookup(name)
    for keytype, key in (entry or {}).items():
        connection.client.get_host_keys().add(name, keytype, key)


def host_key_name(connection: Connection) -> str:
    """The name paramiko's SSHClient.connect looks the server's key up by."""
    port = int(connection.port)
    return str(connection.host) if port == 22 else f"[{connection.host}]:{port}"


def parsed_known_hosts(paths: tuple[Path, ...]) -> paramiko.HostKeys:
    """The files' keys merged in order (as paramiko loads them), cached by path and mtime."""
    stamps = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue  # absent or unreadable: paramiko's own loading skips it too
        if path.is_file():
            stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
    key = tuple(stamps)
    with _lock:
        if key not in _parsed:
            keys = paramiko.HostKeys()
            for path_name, _, _ in key:
                with suppress(OSError):
                    keys.load(path_name)
            if len(_parsed) >= 8:  # files edited during a long drain
                _parsed.clear()
            _parsed[key] = keys
        return _parsed[key]


def _known_hosts_files(connection: Connection, known_hosts: str | None) -> list[Path]:
    configured = str(connection.ssh_config.get("userknownhostsfile", ""))
    files = [Path(p).expanduser() for p in configured.split()]
    if known_hosts:
        files += [Path(p).expanduser() for p in known_hosts.split()]
    return files
