"""The SSH connection the guard opens: Nagle off (as OpenSSH sets it), for small queries."""

import socket

import pytest

from leaseguard.adapters.ssh import DatabaseAddress, SshOptions, database_tunnel, make_connection
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


def test_the_tunnels_ssh_socket_sends_small_packets_at_once(app_host_pg):
    connection = connect_to(app_host_pg)
    try:
        with database_tunnel(connection, DatabaseAddress()) as port:
            assert nodelay(connection) == 1
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the forward reaches PostgreSQL on the host's loopback
    finally:
        connection.close()


def test_an_address_the_host_cannot_reach_fails_before_the_tunnel_opens(app_host_pg):
    """Not after the database client has waited out its connect timeout."""
    connection = connect_to(app_host_pg)
    try:
        with (
            pytest.raises(TunnelError, match=r"could not connect to 127\.0\.0\.1:5999"),
            database_tunnel(connection, DatabaseAddress(port=5999)),
        ):
            pytest.fail("the tunnel must not open to an address the host cannot reach")
    finally:
        connection.close()
