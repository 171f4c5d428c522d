"""SSH: host-key policy, running lookups on a host, and the tunnel to its database.

Fabric's Connection accepts any host key by default (paramiko's AutoAddPolicy) and never
reads known_hosts. A guard that decides whether to kill work must know which host it
asked, so leaseguard verifies host keys against known_hosts unless told otherwise.
"""

from __future__ import annotations

import shlex
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from fabric import Config, Connection
from invoke.exceptions import ThreadException

from leaseguard.errors import ConfigError, TunnelError
from leaseguard.runtime import LOOKUP_TIMEOUT_S, CommandResult

TUNNEL_READY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SshOptions:
    """How to reach a host: what Fabric users set, plus the host-key policy."""

    user: str | None = None
    port: int | None = None
    key_filename: str | None = None
    known_hosts: str | None = None
    accept_unknown_host_keys: bool = False
    gateway: str | None = None  # a ProxyJump-style "user@host:port"
    connect_timeout_s: int = 10


def make_connection(host: str, options: SshOptions, config: Config | None = None) -> Connection:
    """A Fabric Connection whose host keys are verified (unless explicitly accepted)."""
    connect_kwargs: dict[str, Any] = {}
    if options.key_filename:
        connect_kwargs["key_filename"] = options.key_filename
    gateway = None
    if options.gateway:
        gateway = make_connection(options.gateway, _gateway_options(options), config)
    connection = Connection(
        host,
        user=options.user,
        port=options.port,
        config=config,
        gateway=gateway,
        connect_timeout=options.connect_timeout_s,
        connect_kwargs=connect_kwargs,
    )
    apply_host_key_policy(connection, options)
    return connection


def _gateway_options(options: SshOptions) -> SshOptions:
    return SshOptions(
        key_filename=options.key_filename,
        known_hosts=options.known_hosts,
        accept_unknown_host_keys=options.accept_unknown_host_keys,
        connect_timeout_s=options.connect_timeout_s,
    )


def apply_host_key_policy(connection: Connection, options: SshOptions) -> None:
    """Load known_hosts (system, ssh_config's UserKnownHostsFile, explicit) and reject others."""
    client = connection.client
    client.load_system_host_keys()
    for path in _known_hosts_files(connection, options):
        if path.is_file():
            client.load_host_keys(str(path))
    if options.accept_unknown_host_keys:
        client.set_missing_host_key_policy(paramiko.WarningPolicy())
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    gateway = connection.gateway
    if isinstance(gateway, Connection):
        apply_host_key_policy(gateway, options)


def _known_hosts_files(connection: Connection, options: SshOptions) -> list[Path]:
    configured = str(connection.ssh_config.get("userknownhostsfile", ""))
    files = [Path(p).expanduser() for p in configured.split()]
    if options.known_hosts:  # like ssh's UserKnownHostsFile: one or more paths
        files += [Path(p).expanduser() for p in options.known_hosts.split()]
    return files


def open_connection(connection: Connection) -> None:
    """Connect now, translating SSH failures into a TunnelError that names the host."""
    try:
        if not connection.is_connected:
            connection.open()
            _no_delay(connection)
    except paramiko.BadHostKeyException:
        raise TunnelError(
            f"host {connection.host}: host key does not match known_hosts (BadHostKeyException)"
        ) from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise TunnelError(
                f"host {connection.host}: host key is not in known_hosts; add it (ssh-keyscan) "
                "or set accept_unknown_host_keys explicitly"
            ) from None
        raise TunnelError(f"host {connection.host}: SSH failed ({type(exc).__name__})") from None
    except (OSError, EOFError) as exc:
        raise TunnelError(
            f"host {connection.host}:{connection.port}: cannot connect over SSH "
            f"({type(exc).__name__})"
        ) from None


# OpenSSH client flags that take a value, and the -o option each one stands for.
_FLAG_OPTIONS = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}
_FLAGS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


def parse_openssh_args(text: str) -> dict[str, str]:
    """The `-o` options (and -J/-i/-p/-l) in an ssh command line, by lower-cased name.

    Ansible keeps a host's jump host, known_hosts file and host-key policy in
    ansible_ssh_common_args / ansible_ssh_extra_args; the tunnel must honour the same ones.
    Like ssh itself, the first value given for an option wins.
    """
    try:
        words = shlex.split(text)
    except ValueError:
        raise ConfigError("the host's ssh arguments cannot be parsed (unbalanced quotes)") from None
    options: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-") or len(word) < 2 or word[1] not in _FLAGS_WITH_VALUE:
            continue
        flag, value = word[:2], word[2:]
        if not value and index < len(words):
            value, index = words[index], index + 1
        if flag == "-o":
            name, _, option_value = value.replace("=", " ", 1).partition(" ")
            options.setdefault(name.strip().lower(), option_value.strip())
        elif flag in _FLAG_OPTIONS:
            options.setdefault(_FLAG_OPTIONS[flag], value)
    return options


def _no_delay(connection: Connection) -> None:
    """Send small packets at once, as OpenSSH does; paramiko leaves Nagle on.

    Each guard query is a few small request/response packets through the tunnel. With Nagle
    on, they wait for the peer's delayed ACK (~40 ms a round trip): measured, a drain poll
    took 59 ms instead of 15 ms (benchmarks/RESULTS.md). Behind a jump host the transport
    runs over a channel, not a socket, and the gateway's own connection is the one to tune.
    """
    transport = connection.client.get_transport()
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    gateway = connection.gateway
    if isinstance(gateway, Connection) and gateway.is_connected:
        _no_delay(gateway)


class FabricRunner:
    """Runs lookup commands on a host over an open Fabric Connection."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.label = str(connection.host)

    def run(self, argv: Sequence[str]) -> CommandResult:
        open_connection(self.connection)
        try:
            result = self.connection.run(
                shlex.join(argv), hide=True, warn=True, in_stream=False, timeout=LOOKUP_TIMEOUT_S
            )
        except Exception as exc:  # invoke raises CommandTimedOut, paramiko its own errors
            if type(exc).__name__ == "CommandTimedOut":
                return CommandResult(124, "")
            raise TunnelError(
                f"host {self.label}: running a lookup over SSH failed ({type(exc).__name__})"
            ) from None
        return CommandResult(int(result.exited), str(result.stdout), str(result.stderr))


@dataclass(frozen=True)
class DatabaseAddress:
    """The database as seen from the app host: by default its own loopback."""

    host: str = "127.0.0.1"
    port: int = 5432


@contextmanager
def database_tunnel(connection: Connection, address: DatabaseAddress) -> Iterator[int]:
    """Forward a free local port to `address` through the host; yields the local port.

    forward_local returns before its listener is bound, so the port is polled until it
    accepts. The tunnel is closed on every exit path by forward_local's own context.
    """
    open_connection(connection)
    _probe_target(connection, address)
    local_port = _free_local_port()
    try:
        with connection.forward_local(
            local_port, remote_port=address.port, remote_host=address.host, local_host="127.0.0.1"
        ):
            _wait_until_listening(local_port, connection.host)
            yield local_port
    except TunnelError:
        raise
    except (OSError, paramiko.SSHException) as exc:
        raise TunnelError(
            f"host {connection.host}: tunnel to {address.host}:{address.port} failed "
            f"({type(exc).__name__})"
        ) from None
    except ThreadException as exc:
        # The forwarding thread's error surfaces when forward_local exits, replacing whatever
        # the database connection raised meanwhile; it is the more precise of the two.
        names = ", ".join(sorted({type(w.value).__name__ for w in exc.exceptions}))
        raise TunnelError(
            f"host {connection.host}: the host could not connect to "
            f"{address.host}:{address.port} through the tunnel ({names})"
        ) from None


def _probe_target(connection: Connection, address: DatabaseAddress) -> None:
    """Have the host connect to the database address once before forwarding to it.

    When the host cannot connect, Fabric's forwarder thread dies quietly (its error surfaces
    only when the tunnel closes) and the database client waits out its whole connect
    timeout; a refused or unreachable address is named here in one round trip instead.
    PostgreSQL (13+) does not log a connection closed before its startup packet.
    """
    transport = connection.client.get_transport()
    assert transport is not None  # open_connection() connected it
    try:
        channel = transport.open_channel(
            "direct-tcpip",
            (address.host, address.port),
            ("127.0.0.1", 0),
            timeout=TUNNEL_READY_TIMEOUT_S,
        )
    except (paramiko.SSHException, OSError) as exc:
        raise TunnelError(
            f"host {connection.host}: the host could not connect to "
            f"{address.host}:{address.port} through the tunnel ({type(exc).__name__})"
        ) from None
    channel.close()


def _free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_listening(port: int, host: str) -> None:
    deadline = time.monotonic() + TUNNEL_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.01)
    raise TunnelError(f"host {host}: the tunnel's local listener never came up")
