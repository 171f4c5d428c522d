"""Config values checked, naming the key (`lease.x`): a typo never becomes a traceback or a default.
One DSN is one database (db_host/db_port fill its gaps); a message shows only its host and port."""

import difflib
import math
import re
import shlex
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from leaseguard.core.errors import ConfigError

T = TypeVar("T")
Data = Mapping[str, Any]
# PostgreSQL truncates a longer identifier (NAMEDATALEN - 1), so it would address another name.
MAX_IDENTIFIER_BYTES = 63
# int() and float() read any script's digits (Arabic-Indic, full-width): a number in a config
# is written in ASCII digits, and a message never repeats the value it refuses.
NOT_ASCII = "must be a number written in ASCII digits (0-9, an optional decimal point)"
# One `keyword = value` pair of a key/value DSN: a single-quoted value or non-blanks.
_DSN_PAIR = re.compile(r"\s*([^\s=]+)\s*(=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']*))?")
# OpenSSH client flags that take a value, and the -o option each one stands for.
_FLAG_OPTIONS = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}
_FLAGS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


def section(data: Data, key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a mapping, got {type(value).__name__}")
    return value or {}


def reject_unknown(data: Mapping[Any, Any], known: frozenset[str], *, prefix: str) -> None:
    """ConfigError naming every key of `data` outside `known`: a misspelt key is not ignored."""
    if unknown := sorted(str(k) for k in data if k not in known):
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        raise ConfigError(f"unknown config key(s): {', '.join(prefix + k for k in unknown)}{hint}")


def text_value(data: Data, key: str, default: Any, *, prefix: str = "") -> str:
    value = default if data.get(key) is None else data[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{prefix}{key} must be a non-empty string")
    if "\x00" in value:
        raise ConfigError(f"{prefix}{key} must not contain a NUL character")
    return value


def identifier(data: Data, key: str, default: Any, *, prefix: str = "") -> str:
    name = text_value(data, key, default, prefix=prefix)
    if len(name.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise ConfigError(
            f"{prefix}{key} is longer than {MAX_IDENTIFIER_BYTES} bytes; PostgreSQL would "
            "truncate it and address another name"
        )
    return name


def choice(data: Data, key: str, default: Any, *, choices: Sequence[str], prefix: str = "") -> str:
    value = text_value(data, key, default, prefix=prefix)
    if value not in choices:
        raise ConfigError(f"{prefix}{key} must be one of {', '.join(choices)}")
    return value


def _convert(data: Data, key: str, default: Any, prefix: str, convert: Callable[[Any], T]) -> T:
    what = "a number" if convert is float else "a whole number"
    value = default if data.get(key) is None else data[key]
    kinds = (int, float, str) if convert is float else (int, str)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ConfigError(f"{prefix}{key} must be {what}")
    if isinstance(value, str) and not value.isascii():
        raise ConfigError(f"{prefix}{key} {NOT_ASCII}")
    try:
        return convert(value)
    except ValueError:
        raise ConfigError(f"{prefix}{key} must be {what}") from None


def number_value(
    data: Data, key: str, default: Any, *, prefix: str, minimum: float = 0, positive: bool = False
) -> float:
    number = _convert(data, key, default, prefix, float)
    if not math.isfinite(number) or number < minimum:
        raise ConfigError(f"{prefix}{key} must be a finite number >= {minimum:g}")
    if positive and number == 0:
        raise ConfigError(f"{prefix}{key} must be greater than 0")
    return number


def whole_number(data: Data, key: str, default: Any, *, prefix: str = "", maximum: int = 0) -> int:
    """A whole number > 0; with `maximum` (a port: 65535), no greater than it."""
    number = _convert(data, key, default, prefix, int)
    if number <= 0:
        raise ConfigError(f"{prefix}{key} must be greater than 0")
    if maximum and number > maximum:
        raise ConfigError(f"{prefix}{key} must be a port number (1-{maximum})")
    return number


def zone(data: Data, key: str, default: Any, *, prefix: str = "") -> str:
    """An IANA zone name (UTC, Europe/Berlin): PostgreSQL knows the same database of zones."""
    name = text_value(data, key, default, prefix=prefix)
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{prefix}{key} must be an IANA time zone name such as UTC") from None
    return name


def optional(read: Callable[..., T], **options: Any) -> Callable[..., T | None]:
    return lambda data, key, default=None, *, prefix="": (
        None if data.get(key) is None else read(data, key, None, prefix=prefix, **options)
    )


optional_text = optional(text_value)
optional_port = optional(whole_number, maximum=65535)


def flag(data: Data, key: str, default: bool, *, prefix: str = "") -> bool:
    """A YAML boolean; a string such as "false" is refused rather than read as true."""
    value = default if data.get(key) is None else data[key]
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}{key} must be true or false")
    return value


def parse_command(data: Data, key: str, _: Any = None, *, prefix: str = "") -> tuple[str, ...]:
    """A command as argv: a string runs under `sh -c`; missing or empty is no command."""
    value = data.get(key)
    if value is None or (isinstance(value, list | tuple) and not value):
        return ()
    if isinstance(value, str):
        value = ["sh", "-c", value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{prefix}{key} must be a command string or a list of arguments")
    return tuple(value)


def refuse_non_ascii_numbers(args: Data, spec: Data, *, prefix: str = "") -> None:
    """ConfigError naming an int/float option of `spec` in non-ASCII digits (float() reads them)."""
    for name, option in spec.items():
        value = args.get(name) if isinstance(args, Mapping) else None
        kind = option.get("type")
        if kind in ("float", "int") and isinstance(value, str) and not value.isascii():
            raise ConfigError(f"{prefix}{name} {NOT_ASCII}")
        if kind == "dict" and option.get("options") and isinstance(value, Mapping):
            refuse_non_ascii_numbers(value, option["options"], prefix=f"{prefix}{name}.")


def invalid_dsn(conninfo: str) -> ConfigError:
    """Why libpq refused a DSN, naming the keyword at fault, never a value (libpq's may)."""
    from psycopg import pq

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
    from psycopg.conninfo import make_conninfo

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
    import psycopg.conninfo  # here: loading the Fabric collection loads no psycopg

    try:
        return psycopg.conninfo.conninfo_to_dict(conninfo)
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
        switch, value = word[:2], word[2:] or next(rest, "")
        if switch == "-o":
            name, _, option_value = value.replace("=", " ", 1).partition(" ")
            options.setdefault(name.strip().lower(), option_value.strip())
        elif switch in _FLAG_OPTIONS:
            options.setdefault(_FLAG_OPTIONS[switch], value)
    return options
