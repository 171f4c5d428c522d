"""The SSH connection the guard opens: Nagle off (as OpenSSH sets it), for small queries."""

import socket
import threading

import pytest

from leaseguard.adapters.ssh import DatabaseAddress, SshOptions, make_connection, tunnelled
from leaseguard.core.errors import TunnelError

pytestmark = pytest.mark.integration


def nodelay(connection):
    sock = connection.client.get_transport().sock
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def connect_to(host):
    options = SshOptions(
        user="root",
        key_filename=str(host.client_key_path),
        known_hosts=str(host.known_hosts_path),
    )
    return make_connection(host.addr, options)


DSN = "dbname=postgres user=postgres"


def test_the_tunnels_ssh_socket_sends_small_packets_at_once(app_host_pg):
    connection = connect_to(app_host_pg)
    with tunnelled(connection, DSN, DatabaseAddress()) as (conninfo, tunnel):
        assert nodelay(connection) == 1
        assert f"port={tunnel.port}" in conninfo
        with socket.create_connection(("127.0.0.1", tunnel.port), timeout=5):
            pass  # the forward reaches PostgreSQL on the host's loopback
    assert not connection.is_connected


def test_an_address_the_host_cannot_reach_fails_before_the_tunnel_opens(app_host_pg):
    """Not after the database client has waited out its connect timeout."""
    connection = connect_to(app_host_pg)
    with (
        pytest.raises(TunnelError, match=r"could not connect to 127\.0\.0\.1:5999"),
        tunnelled(connection, DSN, DatabaseAddress(port=5999)),
    ):
        pytest.fail("the tunnel must not open to an address the host cannot reach")
    assert not connection.is_connected


def test_an_unreachable_address_is_named_at_once(app_host_pg):
    import time
    from datetime import UTC, datetime

    from leaseguard.adapters.ssh import FabricRunner, open_connection
    from leaseguard.core.contract import Contract
    from leaseguard.orchestration.ssh_session import host_session

    connection = connect_to(app_host_pg)
    began = time.monotonic()
    open_connection(connection)  # as `fab` opens it, before the lookups and the tunnel share it
    try:
        with (
            pytest.raises(TunnelError, match=r"could not connect to 127\.0\.0\.1:5999"),
            host_session(
                Contract(),
                FabricRunner(connection),
                tunnelled(connection, DSN, DatabaseAddress(port=5999), probe=False),
                connect=False,  # the first poll connects, as with several hosts
                task_timeout_s=60.0,
                runtime_started_at=datetime.now(UTC),
            ) as session,
        ):
            session.judge()
    finally:
        connection.close()
    assert time.monotonic() - began < Contract().connect_timeout_s


def tunnel_threads():
    return [t for t in threading.enumerate() if t.name.startswith("leaseguard-tunnel-")]


def test_a_closed_tunnel_leaves_no_thread_and_a_closed_connection_no_jump_host(app_host_pg):
    """Every forwarding thread is joined at close, and the jump host's own SSH connection
    (which Fabric leaves open) closes with the connection made through it."""
    options = SshOptions(
        user="root",
        key_filename=str(app_host_pg.client_key_path),
        known_hosts=str(app_host_pg.known_hosts_path),
        gateway=f"root@{app_host_pg.addr}",
    )
    connection = make_connection(app_host_pg.addr, options)
    with tunnelled(connection, DSN, DatabaseAddress()) as (_, tunnel):
        with socket.create_connection(("127.0.0.1", tunnel.port), timeout=5) as client:
            client.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")  # SSLRequest
            assert client.recv(1) in (b"N", b"S")  # PostgreSQL answered through it
            assert len(tunnel_threads()) == 2  # the accept loop, this forward
        assert connection.gateway.is_connected
    assert tunnel_threads() == []
    assert not connection.is_connected
    assert not connection.gateway.is_connected
