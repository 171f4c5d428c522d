"""One config value read and checked, its key named on error with its section (`lease.x`): a
misspelt or mistyped key never becomes a traceback or a default."""

from __future__ import annotations

import difflib
import math
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from leaseguard.core.errors import ConfigError

T = TypeVar("T")
Data = Mapping[str, Any]
# PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes: a longer name would silently
# address another column, so it is refused.
MAX_IDENTIFIER_BYTES = 63
# int() and float() read any script's digits (Arabic-Indic, full-width): a number in a config
# is written in ASCII digits, and a message never repeats the value it refuses.
NOT_ASCII = "must be a number written in ASCII digits (0-9, an optional decimal point)"


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


def status_list(data: Data, key: str, default: Any, *, allow_empty: bool) -> tuple[str, ...] | None:
    """A list of statuses, once each; None when it is missing and so is `default`."""
    value = data.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key} must be a list of non-empty strings")
    if not value and not allow_empty:
        raise ConfigError(f"{key} must name at least one status")
    return tuple(dict.fromkeys(value))


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
    """A finite number >= `minimum`; `positive`: > 0 as well."""
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


def _zone(data: Data, key: str, default: Any, *, prefix: str = "") -> str:
    """An IANA zone name (UTC, Europe/Berlin): PostgreSQL knows the same database of zones."""
    name = text_value(data, key, default)
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{key} must be an IANA time zone name such as UTC") from None
    return name


def _optional(read: Callable[..., T], **options: Any) -> Callable[..., T | None]:
    """`read`, or None when the key is missing or null."""
    return lambda data, key, default=None, *, prefix="": (
        None if data.get(key) is None else read(data, key, None, prefix=prefix, **options)
    )


optional_text = _optional(text_value)
optional_identifier = _optional(identifier)
optional_number = _optional(number_value, positive=True)
optional_port = _optional(whole_number, maximum=65535)
optional_zone = _optional(_zone)


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
    """ConfigError naming the first int/float option of `spec` given as non-ASCII text: for
    fronts whose own conversion (Ansible's float()) would read any script's digits first."""
    for name, option in spec.items():
        value = args.get(name) if isinstance(args, Mapping) else None
        kind = option.get("type")
        if kind in ("float", "int") and isinstance(value, str) and not value.isascii():
            raise ConfigError(f"{prefix}{name} {NOT_ASCII}")
        if kind == "dict" and option.get("options") and isinstance(value, Mapping):
            refuse_non_ascii_numbers(value, option["options"], prefix=f"{prefix}{name}.")
