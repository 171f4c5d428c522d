"""SSH: host-key policy, running lookups on a host, and the tunnel to its database.

Fabric's Connection accepts any host key by default (paramiko's AutoAddPolicy) and never
reads known_hosts. A guard that decides whether to kill work must know which host it
asked, so leaseguard verifies host keys against known_hosts unless told otherwise.
"""

from __future__ import annotations

import logging
import select
import shlex
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

try:
    import paramiko
    from fabric import Config, Connection
    from invoke.exceptions import CommandTimedOut
except ModuleNotFoundError as exc:  # an extra, not in the base install (pyproject.toml)
    raise ModuleNotFoundError(
        f"leaseguard's SSH tunnel needs Fabric and paramiko ({exc.name} is not installed): "
        "pip install 'leaseguard[fabric]' (or 'leaseguard[ansible]' for the collection)",
        name=exc.name,
    ) from exc

from leaseguard.adapters.runtime import LOOKUP_TIMEOUT_S
from leaseguard.adapters.ssh_client import AeadFirstTransport, trust_known_hosts
from leaseguard.core.errors import TunnelError
from leaseguard.core.lookups import CommandResult

log = logging.getLogger("leaseguard.tunnel")

# paramiko sends a keepalive after this many seconds without sending anything, so a dead
# link always has unacknowledged data in flight, which TCP_USER_TIMEOUT then bounds.
KEEPALIVE_INTERVAL_S = 1
_CHUNK = 32768


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
    connect_kwargs["transport_factory"] = AeadFirstTransport
    return Connection(
        host,
        user=options.user,
        port=options.port,
        config=config,
        gateway=gateway,
        connect_timeout=bound,
        connect_kwargs=connect_kwargs,
    )


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
    delayed ACK (~40 ms a round trip): a drain poll took 59 ms instead of 15 ms
    (benchmarks/RESULTS.md).

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
        except CommandTimedOut:
            return CommandResult(124, "")
        except Exception as exc:  # paramiko's and the socket's own errors
            transport = self.connection.client.get_transport()
            if transport is None or not transport.is_active():
                raise TunnelError(
                    f"host {self.label}: the SSH connection was lost during a lookup "
                    f"({type(exc).__name__})"
                ) from None
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
    """Forward a free local port to `address` through the host; yields the local port."""
    with forwarded(connection, address) as tunnel:
        yield tunnel.port


@contextmanager
def forwarded(
    connection: Connection, address: DatabaseAddress, *, probe: bool = True
) -> Iterator[DatabaseTunnel]:
    """A DatabaseTunnel to `address` through the host, closed on every exit path.

    `probe=False`: the caller connects through it at once, and a refused address fails that
    connection just as fast, naming the same cause (`failure()`); the probe would cost the
    host a TCP connection and the database a backend process for nothing.
    """
    open_connection(connection)
    tunnel = DatabaseTunnel(connection, address)
    if probe:
        tunnel.probe()
    tunnel.start()
    try:
        yield tunnel
    finally:
        tunnel.close()


class DatabaseTunnel:
    """A local listener that forwards each accepted connection over its own SSH channel.

    Fabric's forward_local runs all connections from one manager thread that dies on the
    first channel the host refuses (a database restarting), while its socket keeps
    listening: every later connection then waited out the whole connect timeout. Here a
    refused channel closes only the connection it was opened for, at once, and the reason
    is kept for the session to report (`failure()`). When the SSH connection itself died,
    `ensure()` reconnects, so a drain reaches a database (or a host) that comes back.
    """

    def __init__(self, connection: Connection, address: DatabaseAddress) -> None:
        self.connection = connection
        self.address = address
        self.host = str(connection.host)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._failure: TunnelError | None = None

    @property
    def target(self) -> str:
        return f"{self.address.host}:{self.address.port}"

    def start(self) -> None:
        name = f"leaseguard-tunnel-{self.host}"
        threading.Thread(target=self._accept_loop, name=name, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        self.abort()

    def cut(self) -> None:
        """Give up on the link: end every forwarded connection and the SSH connection.

        Every wait on the host (a query, a lookup command, a reconnect's handshake) then
        ends at once; the next ensure() reconnects.
        """
        self.abort()
        transport = self.connection.client.get_transport()
        if transport is not None:
            transport.close()

    def probe(self) -> None:
        """Have the host connect to the database address once before forwarding to it.

        A refused or unreachable address is named here in one round trip, not after the
        database client has waited out its connect timeout. PostgreSQL (13+) does not log
        a connection closed before its startup packet.
        """
        self._open_channel().close()

    def ensure(self, *, within_s: float = float("inf")) -> None:
        """Make the SSH connection usable for the next database connection.

        A dead connection is reopened when `within_s` (the time the caller has left) leaves
        room for a whole SSH connect; otherwise it is reported as lost, naming the SSH host,
        and reopened on a later call.
        """
        self._failure = None
        transport = self.connection.client.get_transport()
        if transport is not None and transport.is_active():
            return
        if within_s < float(self.connection.connect_timeout or 10):
            raise self._lost(transport)
        self.connection.close()
        open_connection(self.connection)
        log.info("tunnel host=%s SSH connection reopened", self.host)

    def failure(self) -> TunnelError | None:
        """Why the tunnel last failed a connection (the transport's death first)."""
        transport = self.connection.client.get_transport()
        if transport is not None and not transport.is_active():
            return self._lost(transport)
        return self._failure

    def abort(self) -> None:
        """End every forwarded connection now (their database clients see the close)."""
        with self._lock:
            for sock in self._open:
                _shutdown(sock)

    def _lost(self, transport: paramiko.Transport | None) -> TunnelError:
        cause = transport.get_exception() if transport is not None else None
        reason = type(cause).__name__ if cause is not None else "closed"
        return TunnelError(f"host {self.host}: the SSH connection was lost ({reason})")

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # the listener was closed: the tunnel is done
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.add(client)
        try:
            channel = self._open_channel()
        except TunnelError as exc:
            self._failure = exc
            log.debug("tunnel host=%s channel refused reason=%s", self.host, exc)
        else:
            try:
                _pump(client, channel)
            finally:
                # The SSH connection may be closing already (the task is done with the host).
                with suppress(OSError, EOFError):
                    channel.close()
        finally:
            with self._lock:
                self._open.discard(client)
            client.close()

    def _open_channel(self) -> paramiko.Channel:
        transport = self.connection.client.get_transport()
        if transport is None or not transport.is_active():
            raise self._lost(transport)
        try:
            return transport.open_channel(
                "direct-tcpip",
                (self.address.host, self.address.port),
                ("127.0.0.1", 0),
                timeout=float(self.connection.connect_timeout or 10),
            )
        except paramiko.ChannelException:
            raise TunnelError(
                f"host {self.host}: the host could not connect to {self.target} through the "
                "tunnel (ChannelException)"
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if not transport.is_active():
                raise self._lost(transport) from None
            raise TunnelError(
                f"host {self.host}: the SSH connection did not open a channel to "
                f"{self.target} ({type(exc).__name__})"
            ) from None


def _pump(client: socket.socket, channel: paramiko.Channel) -> None:
    """Copy bytes both ways until either side closes (or the tunnel aborts the client)."""
    ends: list[Any] = [client, channel]
    while True:
        readable, _, _ = select.select(ends, [], [])
        for end in readable:
            try:
                data = end.recv(_CHUNK)
            except OSError:
                return
            if not data:
                return
            other = channel if end is client else client
            try:
                other.sendall(data)
            except (OSError, EOFError):  # paramiko: EOFError for a channel already closed
                return


def _shutdown(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
