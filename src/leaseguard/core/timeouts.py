"""Parsing of task timeouts and durations, as configured on the protected host."""

from __future__ import annotations

import math
import re

from leaseguard.core.errors import TimeoutValueError

# Plain decimal notation in ASCII digits only: float() alone would also take "inf", "nan",
# "1_000" and "0x10"-like oddities that no operator means as a timeout, and both float() and
# a regex's \d read Arabic-Indic or full-width digits as numbers (tests/unit/test_timeouts.py).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WHOLE = re.compile(r"[+-]?[0-9]+")


def is_decimal_text(text: str, *, whole: bool = False) -> bool:
    """Whether `text` (surrounding whitespace aside) is a number in plain ASCII notation."""
    return bool((_WHOLE if whole else _DECIMAL).fullmatch(text.strip()))


def parse_timeout_s(value: object, *, what: str = "task timeout") -> float:
    """Return `value` as a positive finite number of seconds, or raise TimeoutValueError.

    `value` is usually text read from a host ("3600", "3600.0", " 3600 \\n"). The message
    never repeats the value itself: a mis-configured variable name could point at a secret.
    """
    if isinstance(value, bool):
        raise TimeoutValueError(f"{what} is a boolean, not a number of seconds")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise TimeoutValueError(f"{what} is empty, expected a number of seconds")
        if not is_decimal_text(text):
            raise TimeoutValueError(f"{what} is not a number of seconds")
        number = float(text)
    else:
        raise TimeoutValueError(f"{what} has type {type(value).__name__}, expected a number")
    if not math.isfinite(number):
        raise TimeoutValueError(f"{what} is not finite")
    if number <= 0:
        raise TimeoutValueError(f"{what} must be greater than 0 seconds")
    return number
