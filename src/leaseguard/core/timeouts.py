"""Task timeouts as configured on a protected host, parsed strictly."""

from __future__ import annotations

import math
import re

from leaseguard.core.errors import TimeoutValueError

# Plain ASCII decimal notation: float() alone also takes "inf", "nan" and "1_000", and both
# float() and a regex's \d read Arabic-Indic or full-width digits.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_decimal_text(text: str) -> bool:
    """Whether `text`, surrounding whitespace aside, is a number in plain ASCII notation."""
    return bool(_DECIMAL.fullmatch(text.strip()))


def parse_timeout_s(value: object, *, what: str = "task timeout") -> float:
    """`value` (usually text read from a host) as seconds > 0. A message never repeats the
    value: a misnamed variable could point at a secret."""
    if isinstance(value, bool):
        raise TimeoutValueError(f"{what} is a boolean, not a number of seconds")
    if isinstance(value, str):
        if not value.strip():
            raise TimeoutValueError(f"{what} is empty, expected a number of seconds")
        if not is_decimal_text(value):
            raise TimeoutValueError(f"{what} is not a number of seconds")
        value = float(value)
    if not isinstance(value, int | float):
        raise TimeoutValueError(f"{what} has type {type(value).__name__}, expected a number")
    if not math.isfinite(value):
        raise TimeoutValueError(f"{what} is not finite")
    if value <= 0:
        raise TimeoutValueError(f"{what} must be greater than 0 seconds")
    return float(value)
