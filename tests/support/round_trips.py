"""A TCP relay in front of PostgreSQL that counts the round trips its clients wait for.

PostgreSQL sends nothing until the client asks for results (Sync, Flush or a simple
Query) and psycopg then waits for them, so every time a client speaks again after the
server has answered is one round trip: through an SSH tunnel or over a real network, the
latency a check pays once more. The bytes are relayed untouched.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Iterator


class RoundTripRelay:
    """Listens on 127.0.0.1; relays each accepted connection to `target`, counting."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._round_trips = 0
        self._closed = threading.Event()

    @property
    def round_trips(self) -> int:
        with self._lock:
            return self._round_trips

    def counted(self) -> RoundTripCount:
        """A count from now on (`RoundTripCount.value` reads it)."""
        return RoundTripCount(self, self.round_trips)

    def serve(self) -> None:
        self._listener.settimeout(0.1)
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        peer = {client: server, server: client}
        last_speaker: socket.socket | None = None
        with selectors.DefaultSelector() as selector, client, server:
            selector.register(client, selectors.EVENT_READ)
            selector.register(server, selectors.EVENT_READ)
            while not self._closed.is_set():
                for key, _ in selector.select(timeout=0.1):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client and last_speaker is not client:
                        with self._lock:
                            self._round_trips += 1
                    last_speaker = sock
                    peer[sock].sendall(data)


class RoundTripCount:
    def __init__(self, relay: RoundTripRelay, start: int) -> None:
        self._relay = relay
        self._start = start

    @property
    def value(self) -> int:
        return self._relay.round_trips - self._start


@contextlib.contextmanager
def round_trip_relay(host: str, port: int) -> Iterator[RoundTripRelay]:
    """A RoundTripRelay to host:port, serving until the block ends."""
    relay = RoundTripRelay((host, port))
    thread = threading.Thread(target=relay.serve, daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.close()
        thread.join(timeout=5)
