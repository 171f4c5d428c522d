"""SSH: lookups run on a host over its connection (leaseguard.adapters.ssh_connect), and
the tunnel to its database."""

from __future__ import annotations

import logging
import select
import shlex
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

try:
    import paramiko
    from fabric import Connection
    from invoke.exceptions import CommandTimedOut
except ModuleNotFoundError as exc:  # an extra, not in the base install (pyproject.toml)
    raise ModuleNotFoundError(
        f"leaseguard's SSH tunnel needs Fabric and paramiko ({exc.name} is not installed): "
        "pip install 'leaseguard[fabric]' (or 'leaseguard[ansible]' for the collection)",
        name=exc.name,
    ) from exc

from leaseguard.adapters.runtime import LOOKUP_TIMEOUT_S
from leaseguard.adapters.ssh_connect import open_connection
from leaseguard.core.errors import TunnelError
from leaseguard.core.lookups import CommandResult

log = logging.getLogger("leaseguard.tunnel")

_JOIN_S = 2.0  # how long closing a tunnel waits for each of its threads


@dataclass(frozen=True)
class DatabaseAddress:
    """The database as seen from the app host: by default its own loopback."""

    host: str = "127.0.0.1"
    port: int = 5432


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
            what = "the SSH connection was lost during a lookup"
            if transport is not None and transport.is_active():
                what = "running a lookup over SSH failed"
            raise TunnelError(f"host {self.label}: {what} ({type(exc).__name__})") from None
        return CommandResult(int(result.exited), str(result.stdout), str(result.stderr))


@contextmanager
def forwarded(
    connection: Connection, address: DatabaseAddress, *, probe: bool = True
) -> Iterator[DatabaseTunnel]:
    """A DatabaseTunnel to `address` through the host, its listener closed on every path.

    `probe=False`: the caller connects through it at once, and a refused address fails that
    connection as fast, naming the same cause (`failure()`).
    """
    open_connection(connection)
    tunnel = DatabaseTunnel(connection, address)
    try:
        if probe:  # a refused address named in one round trip, not after a connect timeout
            tunnel._open_channel().close()
        tunnel._thread(tunnel._accept_loop)
        yield tunnel
    finally:
        tunnel.close()


class DatabaseTunnel:
    """A local listener forwarding each accepted connection over its own SSH channel.

    Unlike Fabric's forward_local (one manager thread that dies on the first refused
    channel, its socket still listening), a refused channel closes only its own connection,
    at once, keeping the reason (`failure()`); a dead SSH connection is reopened by
    `ensure()`, so a drain reaches a database (or a host) that comes back.
    """

    def __init__(self, connection: Connection, address: DatabaseAddress) -> None:
        self.connection = connection
        self.address = address
        self.host = str(connection.host)
        self.target = f"{address.host}:{address.port}"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        # Shared with the forwarding threads: open client sockets, threads, last refusal.
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._failure: TunnelError | None = None

    def close(self) -> None:
        """Stop accepting, end every forwarded connection and wait for their threads."""
        _shutdown(self._listener)  # wakes the accept() in flight (close alone would not)
        self._listener.close()
        self.abort()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            # Bounded: a channel close stuck on a dead link must not hang the front.
            thread.join(timeout=_JOIN_S)

    def _thread(self, target: Callable[..., None], *args: object) -> None:
        def tracked() -> None:
            try:
                target(*args)
            finally:
                with self._lock:
                    self._threads.discard(thread)

        thread = threading.Thread(target=tracked, name=f"leaseguard-tunnel-{self.host}")
        thread.daemon = True
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def cut(self) -> None:
        """Give up on the link: every forwarded connection and the SSH connection end, and
        with them every wait on the host; the next ensure() reconnects."""
        self.abort()
        transport = self.connection.client.get_transport()
        if transport is not None:
            transport.close()

    def ensure(self, *, within_s: float = float("inf")) -> None:
        """Make the SSH connection usable for the next database connection: reopened when
        `within_s` (the caller's time left) holds a whole connect, else reported lost."""
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
        else:
            try:
                _pump(client, channel)
            finally:
                with suppress(OSError, EOFError):  # the SSH connection may be closing
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
                data = end.recv(32768)
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
