"""One DSN means one database: leaseguard.core.config_values, both directions and the conflicts."""

import pytest

from leaseguard.core.config_values import direct_conninfo, tunnel_far_end
from leaseguard.core.errors import ConfigError

# (dsn, db_host, db_port, far end of a tunnel)
TUNNEL_CASES = [
    ("dbname=app", None, None, ("127.0.0.1", 5432)),
    ("host=10.9.9.9 port=6432 dbname=app", None, None, ("10.9.9.9", 6432)),
    ("host=10.9.9.9 dbname=app", None, None, ("10.9.9.9", 5432)),
    ("dbname=app", "db.internal", 6543, ("db.internal", 6543)),
    ("host=10.9.9.9 port=6432", "10.9.9.9", 6432, ("10.9.9.9", 6432)),  # said twice, agreed
    ("port=6432", "db.internal", None, ("db.internal", 6432)),
]

# (dsn, db_host, db_port, the conninfo used without a tunnel)
DIRECT_CASES = [
    ("host=10.9.9.9 port=6432 dbname=app", None, None, "dbname=app host=10.9.9.9 port=6432"),
    ("dbname=app", None, None, "dbname=app"),  # libpq's own defaults, as the CLI
    ("dbname=app", "db.internal", 6543, "dbname=app host=db.internal port=6543"),
]

# (dsn, db_host, db_port, message fragment)
INVALID_CASES = [
    ("host=10.9.9.9 dbname=app", "127.0.0.1", None, "dsn names host 10.9.9.9 and db_host"),
    ("host=a port=6432", None, 5432, "dsn names port 6432 and db_port names 5432"),
    ("port=x", None, None, "the port in dsn is not a number"),
    ("not a dsn", None, None, "not a valid libpq connection string"),
]


@pytest.mark.parametrize(("dsn", "host", "port", "expected"), TUNNEL_CASES)
def test_the_tunnel_far_end_comes_from_db_host_else_the_dsn(dsn, host, port, expected):
    assert tunnel_far_end(dsn, host, port) == expected


@pytest.mark.parametrize(("dsn", "host", "port", "expected"), DIRECT_CASES)
def test_without_a_tunnel_the_dsn_address_is_used_as_given(dsn, host, port, expected):
    assert direct_conninfo(dsn, host, port) == expected


@pytest.mark.parametrize(("dsn", "host", "port", "fragment"), INVALID_CASES)
def test_two_addresses_for_one_database_are_a_usage_error(dsn, host, port, fragment):
    with pytest.raises(ConfigError) as caught:
        tunnel_far_end(dsn, host, port)
    assert fragment in str(caught.value)
    with pytest.raises(ConfigError):
        direct_conninfo(dsn, host, port)


def test_a_password_in_the_dsn_never_reaches_the_message():
    with pytest.raises(ConfigError) as caught:
        tunnel_far_end("host=a password=hunter2", "b", None)
    assert "hunter2" not in str(caught.value)


def test_a_socket_directory_cannot_be_a_tunnel_far_end():
    with pytest.raises(ConfigError, match="socket directory"):
        tunnel_far_end("host=/var/run/postgresql", None, None)
