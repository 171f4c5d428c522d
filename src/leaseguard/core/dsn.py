"""Where to connect: one DSN is one database in every front (db_host/db_port fill in what it
lacks), and an ssh command line's options. A message shows no more of a DSN than host and port."""

from __future__ import annotations

import re
import shlex
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from leaseguard.core.errors import ConfigError

# One `keyword = value` pair of a key/value DSN: a single-quoted value or non-blanks.
_DSN_PAIR = re.compile(r"\s*([^\s=]+)\s*(=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']*))?")
# OpenSSH client flags that take a value, and the -o option each one stands for.
_FLAG_OPTIONS = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}
_FLAGS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


def invalid_dsn(conninfo: str) -> ConfigError:
    """Why libpq refused a DSN, naming the keyword at fault, never a value (libpq's may)."""
    if re.match(r"\s*postgres(?:ql)?://", conninfo):
        return ConfigError("the DSN is not a valid postgresql:// URI")
    known = {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    previous = cut = None
    for match in _DSN_PAIR.finditer(conninfo):
        keyword, value = match.groups()
        # After an unquoted password, a space may have cut it: the "keyword" is part of it.
        if not value or (cut and keyword not in known):
            if previous is None:
                break
            return ConfigError(
                f"the DSN is not valid after keyword {previous!r}: a value with spaces "
                "needs single quotes (keyword='a value')"
            )
        if re.fullmatch(r"[A-Za-z_]+", keyword):
            if keyword not in known:
                return ConfigError(f"the DSN names an unknown libpq keyword {keyword!r}")
            previous = keyword
            cut = keyword.endswith("password") and not value.lstrip("= \t").startswith("'")
    return ConfigError("the DSN is not a valid libpq connection string")


def direct_conninfo(conninfo: str, db_host: str | None, db_port: int | None) -> str:
    host, port = _address(conninfo, db_host, db_port)
    return make_conninfo(conninfo, host=host, port=None if port is None else str(port))


def tunnel_far_end(conninfo: str, db_host: str | None, db_port: int | None) -> tuple[str, int]:
    """Where the tunnel leads, as seen from the host (default 127.0.0.1:5432)."""
    host, port = _address(conninfo, db_host, db_port)
    host = host or "127.0.0.1"
    if host.startswith("/") or "," in host:
        raise ConfigError(
            f"the dsn host {host} is a socket directory or a host list, which a tunnel cannot "
            "reach: set db_host to the database's TCP address as the host sees it"
        )
    return host, port or 5432


def each_hosts_own(host: str) -> bool:
    """Whether a tunnel's far end is each host's own loopback (each may reach its own database)."""
    return host in ("localhost", "::1") or host.startswith("127.")


def reject_hostaddr(conninfo: str) -> None:
    """libpq prefers hostaddr to host, so one in the DSN would bypass the address given."""
    if "hostaddr" in _params(conninfo):
        raise ConfigError("the database address is db_host/db_port, not hostaddr in the DSN")


def _params(conninfo: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise invalid_dsn(conninfo) from None


def _address(
    conninfo: str, db_host: str | None, db_port: int | None
) -> tuple[str | None, int | None]:
    """(host, port) agreed by the DSN and the explicit options; None where neither says."""
    params = _params(conninfo)
    dsn_host, dsn_port = params.get("host") or None, params.get("port") or None
    if dsn_port is not None:
        try:
            dsn_port = int(str(dsn_port))
        except ValueError:
            raise ConfigError("the port in dsn is not a number") from None
    for what, ours, theirs in (("host", dsn_host, db_host), ("port", dsn_port, db_port)):
        if ours and theirs and ours != theirs:
            raise ConfigError(
                f"dsn names {what} {ours} and db_{what} names {theirs}: two databases; "
                "give the address once (in dsn, or in db_host/db_port)"
            )
    host = dsn_host or db_host
    return (str(host) if host else None), dsn_port or db_port


def parse_openssh_args(text: str) -> dict[str, str]:
    """An OpenSSH command line's options by lower-cased name; the first value given wins."""
    try:
        words = shlex.split(text)
    except ValueError:
        raise ConfigError("the host's ssh arguments cannot be parsed (unbalanced quotes)") from None
    options: dict[str, str] = {}
    rest = iter(words)
    for word in rest:
        if not word.startswith("-") or len(word) < 2 or word[1] not in _FLAGS_WITH_VALUE:
            continue
        flag, value = word[:2], word[2:] or next(rest, "")
        if flag == "-o":
            name, _, option_value = value.replace("=", " ", 1).partition(" ")
            options.setdefault(name.strip().lower(), option_value.strip())
        elif flag in _FLAG_OPTIONS:
            options.setdefault(_FLAG_OPTIONS[flag], value)
    return options
