"""SSH: a host's Fabric connection (host keys checked), the lookups over it, the database tunnel."""

import logging
import select
import shlex
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
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
from leaseguard.core.config_values import reject_hostaddr
from leaseguard.core.errors import TunnelError
from leaseguard.core.lookups import CommandResult

log = logging.getLogger("leaseguard.tunnel")


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


@dataclass(frozen=True)
class DatabaseAddress:
    """The database as seen from the app host: by default its own loopback."""

    host: str = "127.0.0.1"
    port: int = 5432


def make_connection(host: str, options: SshOptions, config: Config | None = None) -> Connection:
    """A Fabric Connection with verified host keys, through `options.gateway` or ProxyJump."""
    connection = _Connection(host, options, config)
    jumps = options.gateway or connection.ssh_config.get("proxyjump")
    if options.gateway or (jumps and isinstance(connection.gateway, Connection)):
        # ProxyJump's "a,b" as OpenSSH walks it: a first, b through a, the host through b.
        first, *rest = (hop.strip() for hop in jumps.split(","))
        hops = replace(options, user=None, port=None, gateway=None)
        connection.gateway = make_connection(first, hops, config)
        for hop in rest:
            connection.gateway = _Connection(hop, hops, config, connection.gateway)
    trust_known_hosts(connection, options.known_hosts, options.accept_unknown_host_keys)
    return connection


class _Connection(Connection):  # type: ignore[misc]
    """Fabric's Connection, whose close() also closes its jump hosts (Fabric leaves them open)."""

    def __init__(self, host: str, options: SshOptions, config: Config | None, gateway: Any = None):
        # paramiko's banner, auth and channel waits bounded by the connect budget; the config's
        # connect_kwargs merged here (Fabric ignores them when given any).
        bound, user, port = options.connect_timeout_s, options.user, options.port
        configured = dict(config.get("connect_kwargs") or {}) if config is not None else {}
        kwargs = {k: v for k, v in configured.items() if k not in ("key_filename", "timeout")}
        if options.key_filename:
            kwargs["key_filename"] = options.key_filename
        kwargs = dict(banner_timeout=bound, auth_timeout=bound, channel_timeout=bound) | kwargs
        super().__init__(
            host, user, port, config, gateway, connect_timeout=bound, connect_kwargs=kwargs
        )

    def close(self) -> None:
        super().close()
        if isinstance(self.gateway, Connection):
            self.gateway.close()


def trust_known_hosts(connection: Connection, known_hosts: str | None, lax: bool = False) -> None:
    """Trust only the host's keys: ~/.ssh/known_hosts', else UserKnownHostsFile's or `known_hosts`'
    (unknown keys too if `lax`); on every jump host too (a Fabric config's `gateway`)."""
    port = int(connection.port)
    name = str(connection.host) if port == 22 else f"[{connection.host}]:{port}"
    configured = f"{connection.ssh_config.get('userknownhostsfile', '')} {known_hosts or ''}"
    entry = None
    for paths in (["~/.ssh/known_hosts"], configured.split()):
        keys = paramiko.HostKeys()
        for path in (Path(p).expanduser() for p in paths):
            if path.is_file():
                with suppress(OSError):
                    keys.load(str(path))
        entry = entry or keys.lookup(name)
    for keytype, key in (entry or {}).items():
        connection.client.get_host_keys().add(name, keytype, key)
    policy = paramiko.WarningPolicy if lax else paramiko.RejectPolicy
    connection.client.set_missing_host_key_policy(policy())
    if isinstance(connection.gateway, Connection):
        trust_known_hosts(connection.gateway, known_hosts, lax)


def open_connection(connection: Connection) -> None:
    """Connect now; an SSH failure is a TunnelError naming the host and what to try next."""
    named = f"{given_name(connection)} ({connection.host}:{connection.port})"
    try:
        if not connection.is_connected:
            connection.open()
            hop = connection  # TCP_NODELAY, and a dead link known within the connect timeout:
            while isinstance(hop, Connection) and hop.is_connected:
                transport = hop.client.get_transport()
                if transport is not None:  # after 1 s idle: a dead link has data unacknowledged
                    transport.set_keepalive(1)
                if isinstance(sock := getattr(transport, "sock", None), socket.socket):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    silent_ms = int(float(hop.connect_timeout or 10) * 1000)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, silent_ms)
                hop = hop.gateway  # each jump host too
    except paramiko.BadHostKeyException:
        raise TunnelError(
            f"host {named}: host key does not match known_hosts (BadHostKeyException); if the host "
            "was reinstalled, check its new key's fingerprint and replace its known_hosts line"
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
        if isinstance(exc, OSError) and exc.filename is not None:  # a file here, not the host
            raise TunnelError(
                f"host {named}: a private key file for SSH cannot be read here "
                f"({type(exc).__name__}); check its path (fab -i, connect_kwargs.key_filename, "
                "IdentityFile, ansible_ssh_private_key_file)"
            ) from None
        through = ""
        if isinstance(gate := connection.gateway, Connection):
            through = f" (through the jump host {given_name(gate)} ({gate.host}:{gate.port}))"
        raise TunnelError(
            f"host {named} unreachable: cannot connect over SSH ({type(exc).__name__}); "
            f"check that it is up, that sshd answers on port {connection.port}{through} and "
            "the connect timeout (fab -t), or run with -H excluding it"
        ) from None


def given_name(connection: Connection) -> str:
    """The host as given (-H, an ssh_config alias; not the HostName it resolves to), no user."""
    return str(connection.original_host).rpartition("@")[2]


class FabricRunner:
    def __init__(self, connection: Connection) -> None:
        self.connection, self.label = connection, given_name(connection)

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
            what = "the SSH connection was lost during a lookup"
            if transport is not None and transport.is_active():
                what = "running a lookup over SSH failed"
            raise TunnelError(f"host {self.label}: {what} ({type(exc).__name__})") from None
        return CommandResult(int(result.exited), str(result.stdout), str(result.stderr))


@contextmanager
def tunnelled(
    connection: Connection, conninfo: str, address: DatabaseAddress, *, probe: bool = True
) -> Iterator[tuple[str, "DatabaseTunnel"]]:
    """`conninfo` through a tunnel to `address`, and the tunnel; both closed on every path."""
    from psycopg.conninfo import make_conninfo  # not loaded by `fab --list` (this module is)

    with closing(connection):
        reject_hostaddr(conninfo)
        open_connection(connection)
        with closing(DatabaseTunnel(connection, address)) as tunnel:
            if probe:  # a refused address named in one round trip, not after a connect timeout
                tunnel._open_channel().close()
            tunnel._thread(tunnel._accept_loop)
            yield make_conninfo(conninfo, host="127.0.0.1", port=str(tunnel.port)), tunnel


class DatabaseTunnel:
    """A local listener, one SSH channel a connection (Fabric's forward_local dies on a refusal)."""

    def __init__(self, connection: Connection, address: DatabaseAddress) -> None:
        self.connection, self.host = connection, given_name(connection)
        self.far, self.target = (address.host, address.port), f"{address.host}:{address.port}"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()  # for the sets and failure the threads share
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._failure: TunnelError | None = None

    def close(self) -> None:
        with suppress(OSError):  # wakes the accept() in flight (close alone would not)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self.cut()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:  # bounded: a close stuck on a dead link must not hang the front
            thread.join(timeout=2.0)

    def cut(self) -> None:
        """End every forwarded connection and the SSH connection; ensure() reconnects."""
        with self._lock:
            for sock in self._open:  # wakes the thread blocked on it
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        transport = self.connection.client.get_transport()
        if transport is not None:
            transport.close()

    def ensure(self, *, within_s: float = float("inf")) -> None:
        """Reopen a dead SSH connection if `within_s` (time left) holds a connect, else raise."""
        with self._lock:
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
        with self._lock:
            return self._failure

    def _lost(self, transport: paramiko.Transport | None) -> TunnelError:
        cause = transport.get_exception() if transport is not None else None
        reason = type(cause).__name__ if cause is not None else "closed"
        return TunnelError(f"host {self.host}: the SSH connection was lost ({reason})")

    def _thread(self, target: Callable[..., None], *args: object) -> None:
        name = f"leaseguard-tunnel-{self.host}"
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # the listener was closed: the tunnel is done
                return
            self._thread(self._forward, client)

    def _forward(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.add(client)
        try:
            channel = self._open_channel()
        except TunnelError as exc:
            with self._lock:
                self._failure = exc
            log.debug("tunnel host=%s channel refused reason=%s", self.host, exc)
        else:  # bytes copied both ways until either side closes (or the tunnel aborts the client)
            with suppress(OSError, EOFError), closing(channel):  # paramiko: EOFError once closed
                while True:
                    for end in select.select([client, channel], [], [])[0]:
                        if not (data := end.recv(32768)):
                            return
                        (channel if end is client else client).sendall(data)
        finally:
            with self._lock:
                self._open.discard(client)
            client.close()

    def _open_channel(self) -> paramiko.Channel:
        transport = self.connection.client.get_transport()
        if transport is None or not transport.is_active():
            raise self._lost(transport)
        wait = float(self.connection.connect_timeout or 10)
        try:
            return transport.open_channel("direct-tcpip", self.far, ("127.0.0.1", 0), timeout=wait)
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
