"""Parsing of task timeouts and durations, as configured on the protected host."""

from __future__ import annotations

import math
import re

from leaseguard.core.errors import TimeoutValueError

# Plain decimal notation in ASCII digits only: float() alone also takes "inf", "nan" and
# "1_000", and both float() and a regex's \d read Arabic-Indic or full-width digits.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_decimal_text(text: str) -> bool:
    """Whether `text` (surrounding whitespace aside) is a number in plain ASCII notation."""
    return bool(_DECIMAL.fullmatch(text.strip()))


def parse_timeout_s(value: object, *, what: str = "task timeout") -> float:
    """`value` (usually text read from a host) as seconds > 0, else TimeoutValueError. The
    message never repeats the value: a mis-configured variable name could point at a secret."""
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
