"""Reading one value of a config mapping: its type, its bounds, and the key named on error.

Every message names the offending key with its section prefix (`lease.multiplier`,
`drain.poll_s`), so a misspelt or mistyped key never turns into a traceback or a default.
"""

from __future__ import annotations

import math
import zoneinfo
from collections.abc import Mapping
from typing import Any

from leaseguard.core.errors import ConfigError

# PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes; a longer name would silently
# address another column, so it is refused instead.
MAX_IDENTIFIER_BYTES = 63
# int() and float() read any script's digits (Arabic-Indic, full-width: 3600): a number in a
# config is written in ASCII digits, and a message never repeats the value it refuses.
NOT_ASCII = "must be a number written in ASCII digits (0-9, an optional decimal point)"


def section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a mapping, got {type(value).__name__}")
    return value


def reject_unknown(data: Mapping[Any, Any], known: frozenset[str], *, prefix: str) -> None:
    """ConfigError naming every key of `data` outside `known`: a misspelt key is not ignored."""
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        names = ", ".join(prefix + k for k in unknown)
        raise ConfigError(f"unknown config key(s): {names}")


def text_value(data: Mapping[str, Any], key: str, default: str, *, prefix: str = "") -> str:
    value = data.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{prefix}{key} must be a non-empty string")
    if "\x00" in value:
        raise ConfigError(f"{prefix}{key} must not contain a NUL character")
    return value


def optional_text(data: Mapping[str, Any], key: str, *, prefix: str = "") -> str | None:
    if data.get(key) is None:
        return None
    return text_value(data, key, "", prefix=prefix)


def identifier(data: Mapping[str, Any], key: str, default: str, *, prefix: str = "") -> str:
    name = text_value(data, key, default, prefix=prefix)
    if len(name.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise ConfigError(
            f"{prefix}{key} is longer than {MAX_IDENTIFIER_BYTES} bytes; PostgreSQL would "
            "truncate it and address another name"
        )
    return name


def optional_zone(data: Mapping[str, Any], key: str) -> str | None:
    """An IANA zone name (UTC, Europe/Berlin), or None when not given; PostgreSQL knows the
    same database of zones."""
    if data.get(key) is None:
        return None
    name = text_value(data, key, "")
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{key} must be an IANA time zone name such as UTC") from None
    return name


def optional_identifier(data: Mapping[str, Any], key: str, *, prefix: str = "") -> str | None:
    if data.get(key) is None:
        return None
    return identifier(data, key, "", prefix=prefix)


def status_list(
    data: Mapping[str, Any], key: str, default: tuple[str, ...], *, allow_empty: bool
) -> tuple[str, ...]:
    value = data.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, str) and v != "" for v in value
    ):
        raise ConfigError(f"{key} must be a list of non-empty strings")
    if not value and not allow_empty:
        raise ConfigError(f"{key} must name at least one status")
    return tuple(dict.fromkeys(value))


def number_value(
    data: Mapping[str, Any], key: str, default: float, *, prefix: str = "", minimum: float
) -> float:
    value = data.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{prefix}{key} must be a number")
    if isinstance(value, str) and not value.isascii():
        raise ConfigError(f"{prefix}{key} {NOT_ASCII}")
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{prefix}{key} must be a number") from None
    if not math.isfinite(number) or number < minimum:
        raise ConfigError(f"{prefix}{key} must be a finite number >= {minimum:g}")
    return number


def optional_number(data: Mapping[str, Any], key: str, *, prefix: str = "") -> float | None:
    if data.get(key) is None:
        return None
    number = number_value(data, key, 0.0, prefix=prefix, minimum=0.0)
    if number == 0:
        raise ConfigError(f"{prefix}{key} must be greater than 0")
    return number


def whole_number(data: Mapping[str, Any], key: str, default: int, *, prefix: str = "") -> int:
    value = data.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"{prefix}{key} must be a whole number")
    if isinstance(value, str) and not value.isascii():
        raise ConfigError(f"{prefix}{key} {NOT_ASCII}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{prefix}{key} must be a whole number") from None
    if number <= 0:
        raise ConfigError(f"{prefix}{key} must be greater than 0")
    return number


def flag(data: Mapping[str, Any], key: str, default: bool, *, prefix: str = "") -> bool:
    """A YAML boolean; a string such as "false" is refused rather than read as true."""
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}{key} must be true or false")
    return value


def optional_port(data: Mapping[str, Any], key: str, *, prefix: str = "") -> int | None:
    if data.get(key) is None:
        return None
    port = whole_number(data, key, 0, prefix=prefix)
    if port > 65535:
        raise ConfigError(f"{prefix}{key} must be a port number (1-65535)")
    return port


def choice(
    data: Mapping[str, Any], key: str, default: str, choices: tuple[str, ...], *, prefix: str
) -> str:
    value = text_value(data, key, default, prefix=prefix)
    if value not in choices:
        raise ConfigError(f"{prefix}{key} must be one of {', '.join(choices)}")
    return value


def parse_command(data: Mapping[str, Any], key: str, *, prefix: str) -> tuple[str, ...]:
    value = data.get(key)
    if value is None or (isinstance(value, list | tuple) and not value):
        return ()
    if isinstance(value, str):
        value = ["sh", "-c", value]
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(f"{prefix}{key} must be a command string or a list of arguments")
    if not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{prefix}{key} must be a command string or a list of arguments")
    return tuple(value)


def refuse_non_ascii_numbers(
    args: Mapping[str, Any], spec: Mapping[str, Any], *, prefix: str = ""
) -> None:
    """ConfigError naming the first int/float option of `spec` given as text that is not in
    ASCII digits. For fronts whose own type conversion (Ansible's float()) would read any
    script's digits before leaseguard sees the value."""
    for name, option in spec.items():
        value = args.get(name) if isinstance(args, Mapping) else None
        if value is None:
            continue
        kind = option.get("type")
        if kind in ("float", "int") and isinstance(value, str) and not value.isascii():
            raise ConfigError(f"{prefix}{name} {NOT_ASCII}")
        if kind == "dict" and option.get("options") and isinstance(value, Mapping):
            refuse_non_ascii_numbers(value, option["options"], prefix=f"{prefix}{name}.")
