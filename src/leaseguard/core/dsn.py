"""One DSN means one database, in every front.

A DSN's host and port are never silently replaced: connecting directly, they are used as
given (db_host / db_port add an address only where the DSN has none); through a tunnel, the
tunnel's far end is db_host / db_port, else the DSN's host and port, else 127.0.0.1:5432 (a
database beside the app). A DSN host and a different explicit db_host (or port) name two
databases: a usage error naming both keys. Host names and ports are not secrets; the rest
of the DSN never appears in a message.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from leaseguard.db import invalid_dsn
from leaseguard.errors import ConfigError

DEFAULT_TUNNEL_HOST = "127.0.0.1"
DEFAULT_PORT = 5432


def direct_conninfo(conninfo: str, db_host: str | None, db_port: int | None) -> str:
    """The conninfo the controller connects with itself (no tunnel)."""
    host, port = _address(conninfo, db_host, db_port)
    return make_conninfo(conninfo, host=host, port=None if port is None else str(port))


def tunnel_far_end(conninfo: str, db_host: str | None, db_port: int | None) -> tuple[str, int]:
    """Where the tunnel leads, as seen from the host (its local end replaces the DSN's)."""
    host, port = _address(conninfo, db_host, db_port)
    host = host or DEFAULT_TUNNEL_HOST
    if host.startswith("/") or "," in host:
        raise ConfigError(
            f"the dsn host {host} is a socket directory or a host list, which a tunnel cannot "
            "reach: set db_host to the database's TCP address as the host sees it"
        )
    return host, port or DEFAULT_PORT


def _address(
    conninfo: str, db_host: str | None, db_port: int | None
) -> tuple[str | None, int | None]:
    """(host, port) agreed by the DSN and the explicit options; None where neither says."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise invalid_dsn(conninfo) from None
    dsn_host = params.get("host") or None
    dsn_port = _port(params.get("port"))
    if dsn_host and db_host and dsn_host != db_host:
        raise ConfigError(
            f"dsn names host {dsn_host} and db_host names {db_host}: two databases; "
            "give the address once (in dsn, or in db_host/db_port)"
        )
    if dsn_port and db_port and dsn_port != db_port:
        raise ConfigError(
            f"dsn names port {dsn_port} and db_port names {db_port}: two databases; "
            "give the address once (in dsn, or in db_host/db_port)"
        )
    return (str(dsn_host or db_host) if (dsn_host or db_host) else None), dsn_port or db_port


def _port(value: object) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(str(value))
    except ValueError:
        raise ConfigError("the port in dsn is not a number") from None
