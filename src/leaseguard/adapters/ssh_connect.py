"""SSH connections: to a host and through its jump hosts, with Fabric's own config, the
host-key policy and the connect budget; their failures named with what to try next.

Fabric's Connection accepts any host key by default and never reads known_hosts. A guard
that decides whether to kill work must know which host it asked, so host keys are checked
against known_hosts unless told otherwise.
"""

from __future__ import annotations

import socket
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import paramiko
    from fabric import Config, Connection
except ModuleNotFoundError as exc:  # an extra, not in the base install (pyproject.toml)
    raise ModuleNotFoundError(
        f"leaseguard's SSH tunnel needs Fabric and paramiko ({exc.name} is not installed): "
        "pip install 'leaseguard[fabric]' (or 'leaseguard[ansible]' for the collection)",
        name=exc.name,
    ) from exc

from leaseguard.core.errors import TunnelError

# A keepalive after 1 s without sending: a dead link always has unacknowledged data in
# flight, which TCP_USER_TIMEOUT then bounds.
KEEPALIVE_INTERVAL_S = 1
SYSTEM_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class SshOptions:
    """How to reach a host: what Fabric users set, plus the host-key policy."""

    user: str | None = None
    port: int | None = None
    key_filename: str | None = None
    known_hosts: str | None = None
    accept_unknown_host_keys: bool = False
    gateway: str | None = None  # ProxyJump-style: "user@host:port", or hops "a,b" in order
    connect_timeout_s: int = 10


def make_connection(host: str, options: SshOptions, config: Config | None = None) -> Connection:
    """A Fabric Connection whose host keys are verified (unless explicitly accepted).

    Its gateway: `options.gateway`, else ssh_config's ProxyJump (Fabric walks "a,b" from b
    and without our timeouts: built again, in order); ProxyCommand is left to Fabric.
    """
    gateway = _jump_chain(options.gateway, options, config) if options.gateway else None
    connection = _connection(host, options, config, gateway)
    jumps = connection.ssh_config.get("proxyjump")
    if not options.gateway and jumps and isinstance(connection.gateway, Connection):
        connection.gateway = _jump_chain(jumps, options, config)
    _apply_host_key_policy(connection, options)
    return connection


def _connection(
    host: str, options: SshOptions, config: Config | None, gateway: Connection | None
) -> Connection:
    # paramiko's own banner, auth and channel waits (15 s, 30 s, an hour) are bounded by the
    # connect budget. Fabric uses the config's connect_kwargs only when given none: merged
    # here (its key files Fabric merges itself; its `timeout`, fab -t, is the budget).
    bound = options.connect_timeout_s
    configured = dict(config.get("connect_kwargs") or {}) if config is not None else {}
    configured.pop("key_filename", None)
    configured.pop("timeout", None)
    kwargs: dict[str, Any] = {
        "banner_timeout": bound,
        "auth_timeout": bound,
        "channel_timeout": bound,
        **configured,
    }
    if options.key_filename:
        kwargs["key_filename"] = options.key_filename
    return _Connection(
        host,
        user=options.user,
        port=options.port,
        config=config,
        gateway=gateway,
        connect_timeout=bound,
        connect_kwargs=kwargs,
    )


class _Connection(Connection):  # type: ignore[misc]
    """Fabric's Connection, whose close() also closes its jump hosts' (Fabric leaves them
    open, with their sockets and paramiko's threads)."""

    def close(self) -> None:
        super().close()
        if isinstance(self.gateway, Connection):
            self.gateway.close()


def _jump_chain(jumps: str, options: SshOptions, config: Config | None) -> Connection:
    """ProxyJump's "a,b" as OpenSSH walks it: a first (through its own ssh_config
    ProxyJump, if any), b through a, and the caller's host through b."""
    first, *rest = (hop.strip() for hop in jumps.split(","))
    hop_options = SshOptions(
        key_filename=options.key_filename,
        known_hosts=options.known_hosts,
        accept_unknown_host_keys=options.accept_unknown_host_keys,
        connect_timeout_s=options.connect_timeout_s,
    )
    gateway = make_connection(first, hop_options, config)
    for hop in rest:
        gateway = _connection(hop, hop_options, config, gateway)
    return gateway


def _apply_host_key_policy(connection: Connection, options: SshOptions) -> None:
    """Trust only known_hosts' keys for this host and reject others (warn, when unknown keys
    are explicitly accepted), on the connection and every jump host."""
    trust_known_hosts(connection, options.known_hosts)
    policy = paramiko.WarningPolicy if options.accept_unknown_host_keys else paramiko.RejectPolicy
    connection.client.set_missing_host_key_policy(policy())
    if isinstance(connection.gateway, Connection):
        _apply_host_key_policy(connection.gateway, options)


def trust_known_hosts(connection: Connection, known_hosts: str | None) -> None:
    """Give the client the keys known_hosts lists for its own host, nothing else.

    The system file's entry if it has one (paramiko's precedence), else ssh_config's
    UserKnownHostsFile's or `known_hosts`'; an absent or unreadable file is skipped.
    """
    port = int(connection.port)
    name = str(connection.host) if port == 22 else f"[{connection.host}]:{port}"
    configured = f"{connection.ssh_config.get('userknownhostsfile', '')} {known_hosts or ''}"
    entry = None
    for paths in ([SYSTEM_KNOWN_HOSTS], configured.split()):
        keys = paramiko.HostKeys()
        for path in (Path(p).expanduser() for p in paths):
            if path.is_file():
                with suppress(OSError):
                    keys.load(str(path))
        entry = entry or keys.lookup(name)
    for keytype, key in (entry or {}).items():
        connection.client.get_host_keys().add(name, keytype, key)


def open_connection(connection: Connection) -> None:
    """Connect now; an SSH failure is a TunnelError naming the host and what to try next."""
    named = _named(connection)
    try:
        if not connection.is_connected:
            connection.open()
            _tune(connection)
    except paramiko.BadHostKeyException:
        raise TunnelError(
            f"host {named}: host key does not match known_hosts (BadHostKeyException); if "
            "the host was reinstalled, check its new key's fingerprint and replace its "
            "known_hosts line"
        ) from None
    except paramiko.AuthenticationException as exc:
        raise TunnelError(
            f"host {named}: SSH authentication failed ({type(exc).__name__}); "
            "check the user and the key (fab -i, connect_kwargs.key_filename, IdentityFile) "
            "or its passphrase (connect_kwargs.passphrase, fab --prompt-for-passphrase)"
        ) from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise TunnelError(
                f"host {named}: host key is not in known_hosts; add it "
                "(ssh-keyscan) or set accept_unknown_host_keys explicitly"
            ) from None
        raise TunnelError(
            f"host {named}: SSH failed ({type(exc).__name__}); "
            f"check that `ssh {connection.original_host}` works from here"
        ) from None
    except (OSError, EOFError) as exc:
        gateway = connection.gateway
        through = (
            f" (through the jump host {_named(gateway)})" if isinstance(gateway, Connection) else ""
        )
        raise TunnelError(
            f"host {named} unreachable: cannot connect over SSH ({type(exc).__name__}); "
            f"check that it is up, that sshd answers on port {connection.port}{through} and "
            "the connect timeout (fab -t), or run with -H excluding it"
        ) from None


def _named(connection: Connection) -> str:
    """ "app2 (10.0.0.12:22)": the host as given (-H, an ssh_config alias) and where it is."""
    given = str(connection.original_host).rpartition("@")[2]
    return f"{given} ({connection.host}:{connection.port})"


def _tune(connection: Connection) -> None:
    """Nagle off (a guard query is a few small packets), keepalives, and TCP_USER_TIMEOUT:
    data unacknowledged for the connect timeout means a dead link (TCP alone retransmits
    for ~15 minutes). Behind a jump host the gateway's socket is the one tuned."""
    transport = connection.client.get_transport()
    if transport is not None:
        transport.set_keepalive(KEEPALIVE_INTERVAL_S)
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        silent_ms = int(float(connection.connect_timeout or 10) * 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, silent_ms)
    if isinstance(connection.gateway, Connection) and connection.gateway.is_connected:
        _tune(connection.gateway)
