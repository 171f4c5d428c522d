"""SSH connections: to a host and through its jump hosts, with Fabric's own config, the
host-key policy and the connect budget; their failures named with what to try next.

Fabric's Connection accepts any host key by default (paramiko's AutoAddPolicy) and never
reads known_hosts. A guard that decides whether to kill work must know which host it
asked, so leaseguard verifies host keys against known_hosts unless told otherwise.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
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

from leaseguard.adapters.ssh_client import trust_known_hosts
from leaseguard.core.errors import TunnelError

# paramiko sends a keepalive after this many seconds without sending anything, so a dead
# link always has unacknowledged data in flight, which TCP_USER_TIMEOUT then bounds.
KEEPALIVE_INTERVAL_S = 1


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

    The gateway: `options.gateway` when given, else ssh_config's ProxyJump for this host as
    Fabric's SSHConfig resolves it (ProxyCommand is left to Fabric), each hop with the same
    connect budget and authentication as the host.
    """
    if options.gateway:
        gateway: Connection | None = _jump_chain(options.gateway, options, config)
        connection = _connection(host, options, config, gateway)
    else:
        connection = _connection(host, options, config, None)
        jumps = connection.ssh_config.get("proxyjump")
        # Fabric built a gateway from it (none when the chain names this host itself), but
        # walked "a,b" from b, and with none of our timeouts: built again, in order.
        if jumps and isinstance(connection.gateway, Connection):
            connection.gateway = _jump_chain(jumps, options, config)
    apply_host_key_policy(connection, options)
    return connection


def _connection(
    host: str, options: SshOptions, config: Config | None, gateway: Connection | None
) -> Connection:
    # paramiko waits 15 s for a banner, 30 s for auth and an hour for a channel by default;
    # over a dead link each of those would outlast the connect timeout the user configured.
    bound = options.connect_timeout_s
    connect_kwargs: dict[str, Any] = {
        "banner_timeout": bound,
        "auth_timeout": bound,
        "channel_timeout": bound,
        **_configured_connect_kwargs(config),
    }
    if options.key_filename:
        connect_kwargs["key_filename"] = options.key_filename
    return _Connection(
        host,
        user=options.user,
        port=options.port,
        config=config,
        gateway=gateway,
        connect_timeout=bound,
        connect_kwargs=connect_kwargs,
    )


class _Connection(Connection):  # type: ignore[misc]
    """Fabric's Connection, whose close() also closes its jump hosts' connections (Fabric
    leaves a gateway Connection open, with its socket and paramiko's thread)."""

    def close(self) -> None:
        super().close()
        if isinstance(self.gateway, Connection):
            self.gateway.close()


def _configured_connect_kwargs(config: Config | None) -> dict[str, Any]:
    """The config's `connect_kwargs` (password, passphrase, allow_agent, ...).

    Fabric uses them only when the Connection is given none of its own, and ours always
    are. Its key files are merged by Fabric itself, and its `timeout` (`fab -t`) is the
    connect budget the front already chose (`connect_timeout`; both at once are refused).
    """
    if config is None:
        return {}
    given = dict(config.get("connect_kwargs") or {})
    given.pop("key_filename", None)
    given.pop("timeout", None)
    return given


def _jump_chain(jumps: str, options: SshOptions, config: Config | None) -> Connection:
    """ProxyJump's "a,b", as OpenSSH walks it: a is reached first (through its own
    ssh_config ProxyJump, if any), b through a, and the host (the caller's) through b."""
    first, *rest = (hop.strip() for hop in jumps.split(","))
    hop_options = _gateway_options(options)
    gateway = make_connection(first, hop_options, config)
    for hop in rest:
        gateway = _connection(hop, hop_options, config, gateway)
    return gateway


def _gateway_options(options: SshOptions) -> SshOptions:
    return SshOptions(
        key_filename=options.key_filename,
        known_hosts=options.known_hosts,
        accept_unknown_host_keys=options.accept_unknown_host_keys,
        connect_timeout_s=options.connect_timeout_s,
    )


def apply_host_key_policy(connection: Connection, options: SshOptions) -> None:
    """Trust only the keys known_hosts lists for this host (`ssh_client`), reject others."""
    trust_known_hosts(connection, options.known_hosts)
    client = connection.client
    if options.accept_unknown_host_keys:
        client.set_missing_host_key_policy(paramiko.WarningPolicy())
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    gateway = connection.gateway
    if isinstance(gateway, Connection):
        apply_host_key_policy(gateway, options)


def open_connection(connection: Connection) -> None:
    """Connect now, translating SSH failures into a TunnelError that names the host and
    what to try next."""
    try:
        if not connection.is_connected:
            connection.open()
            _tune(connection)
    except paramiko.BadHostKeyException:
        raise TunnelError(
            f"host {_named(connection)}: host key does not match known_hosts "
            "(BadHostKeyException); if the host was reinstalled, check its new key's "
            "fingerprint and replace its known_hosts line"
        ) from None
    except paramiko.AuthenticationException as exc:
        raise TunnelError(
            f"host {_named(connection)}: SSH authentication failed ({type(exc).__name__}); "
            "check the user and the key (fab -i, connect_kwargs.key_filename, IdentityFile) "
            "or its passphrase (connect_kwargs.passphrase, fab --prompt-for-passphrase)"
        ) from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise TunnelError(
                f"host {_named(connection)}: host key is not in known_hosts; add it "
                "(ssh-keyscan) or set accept_unknown_host_keys explicitly"
            ) from None
        raise TunnelError(
            f"host {_named(connection)}: SSH failed ({type(exc).__name__}); "
            f"check that `ssh {connection.original_host}` works from here"
        ) from None
    except (OSError, EOFError) as exc:
        raise TunnelError(
            f"host {_named(connection)} unreachable: cannot connect over SSH "
            f"({type(exc).__name__}); check that it is up, that sshd answers on port "
            f"{connection.port}{_through(connection)} and the connect timeout (fab -t), "
            "or run with -H excluding it"
        ) from None


def _named(connection: Connection) -> str:
    """ "app2 (10.0.0.12:22)": the host as given (-H, an ssh_config alias) and where it is."""
    given = str(connection.original_host).rpartition("@")[2]
    return f"{given} ({connection.host}:{connection.port})"


def _through(connection: Connection) -> str:
    gateway = connection.gateway
    if isinstance(gateway, Connection):
        return f" (through the jump host {_named(gateway)})"
    return ""


def _tune(connection: Connection) -> None:
    """Nagle off, and a bound on how long the link may stay silent before it counts as dead.

    Nagle: each guard query is a few small request/response packets through the tunnel.
    With Nagle on (paramiko's default; OpenSSH turns it off), they wait for the peer's
    delayed ACK (~40 ms a round trip, several per poll).

    Liveness: with every packet to the host dropped, TCP retransmits for ~15 minutes before
    giving up. Keepalives make sure something is always in flight, and TCP_USER_TIMEOUT
    drops the connection once data stays unacknowledged for the connect timeout, so a dead
    link is detected in that time (plus one keepalive interval) and every wait on it ends.
    Behind a jump host the transport runs over a channel, not a socket, and the gateway's
    own connection is the one to tune.
    """
    transport = connection.client.get_transport()
    if transport is not None:
        transport.set_keepalive(KEEPALIVE_INTERVAL_S)
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        silent_ms = int(float(connection.connect_timeout or 10) * 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, silent_ms)
    gateway = connection.gateway
    if isinstance(gateway, Connection) and gateway.is_connected:
        _tune(gateway)
