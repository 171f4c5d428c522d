"""The SSH connection the guard opens: Nagle off (as OpenSSH sets it), for small queries."""

import socket

import pytest

from leaseguard.ssh import DatabaseAddress, SshOptions, database_tunnel, make_connection

pytestmark = pytest.mark.integration


def nodelay(connection):
    sock = connection.client.get_transport().sock
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_the_tunnels_ssh_socket_sends_small_packets_at_once(app_host_pg):
    options = SshOptions(
        user="root",
        key_filename=str(app_host_pg.client_key_path),
        known_hosts=str(app_host_pg.known_hosts_path),
    )
    connection = make_connection(app_host_pg.addr, options)
    try:
        with database_tunnel(connection, DatabaseAddress()) as port:
            assert nodelay(connection) == 1
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the forward reaches PostgreSQL on the host's loopback
    finally:
        connection.close()
