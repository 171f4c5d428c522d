"""The host keys a paramiko client may trust: its own host's entries in known_hosts.

Fabric's Connection reads no known_hosts; each client gets the keys the files list for
its own host, nothing else.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

if TYPE_CHECKING:  # Fabric itself is imported by adapters.ssh, which names the extra if missing
    from fabric import Connection

SYSTEM_KNOWN_HOSTS = "~/.ssh/known_hosts"


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
    """The files' keys merged in order, as paramiko loads them; a file that is absent or
    unreadable is skipped, as paramiko's own loading skips it."""
    keys = paramiko.HostKeys()
    for path in paths:
        if path.is_file():
            with suppress(OSError):
                keys.load(str(path))
    return keys


def _known_hosts_files(connection: Connection, known_hosts: str | None) -> list[Path]:
    configured = str(connection.ssh_config.get("userknownhostsfile", ""))
    files = [Path(p).expanduser() for p in configured.split()]
    if known_hosts:
        files += [Path(p).expanduser() for p in known_hosts.split()]
    return files
