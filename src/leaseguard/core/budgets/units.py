"""Statement budgets as PostgreSQL's statement_timeout reads them, in whole milliseconds.

A bare number means milliseconds, units are spelt as PostgreSQL spells them (``ms``, ``s``,
``min``, ``h``, ``d``; case-sensitive), and the canonical form is whole seconds when exact
(``3s``, ``60s``) and milliseconds otherwise (``1500ms``). Canonical values need no quoting
beyond the command template's own quotes. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from leaseguard.core.errors import ConfigError

# statement_timeout is an int of milliseconds in PostgreSQL (max ~24.8 days). A cron step's
# budget beyond a day is a unit mistake (milliseconds written as seconds), not a budget.
MAX_BUDGET_MS = 86_400_000

_SHOWN_CHARS = 40


def shown(value: object) -> str:
    """`value` as a message shows it: repr, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 4] + "...'"


_UNITS_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_BUDGET = re.compile(
    r"\s*(?P<sign>[-+]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[A-Za-z]*)\s*",
    re.ASCII,
)
_EXAMPLES = "such as 3s, 1500ms or 1min"


def parse_budget_ms(value: object, *, where: str) -> int:
    """A statement budget as whole milliseconds; ConfigError naming `where` otherwise.

    :param value: ``"3s"``, ``"3000ms"``, ``"1min"``, ``"2 min"``, ``"1.5s"``, or a bare whole
        number of milliseconds (``3000`` or ``"3000"``), as PostgreSQL reads statement_timeout.
    :param where: the config key, naming the job (``cron_budgets.jobs.claim.budget``).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: expected a statement budget {_EXAMPLES}, got {shown(value)}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(
                f"{where}: expected a statement budget {_EXAMPLES}, got {shown(value)}"
            )
        if value != int(value):
            raise ConfigError(
                f"{where}: a bare number means milliseconds and must be whole, got {shown(value)}"
            )
        value = int(value)
    if isinstance(value, int):
        return _checked_ms(Decimal(value), value, where)
    if not value.strip():
        raise ConfigError(f"{where} is empty: give a statement budget {_EXAMPLES}")
    match = _BUDGET.fullmatch(value)
    if match is None:
        raise ConfigError(f"{where}: expected a statement budget {_EXAMPLES}, got {shown(value)}")
    unit = match["unit"]
    if unit and unit not in _UNITS_MS:
        raise ConfigError(
            f"{where}: unknown unit {unit!r} in {shown(value)}; use ms, s, min, h or d"
        )
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal digits
        raise ConfigError(f"{where}: expected a statement budget {_EXAMPLES}") from None
    if not unit and number != number.to_integral_value():
        raise ConfigError(
            f"{where}: a bare number means milliseconds and must be whole, got {shown(value)}"
        )
    if match["sign"] == "-" and number:
        raise ConfigError(f"{where} must be greater than 0, got {shown(value)}")
    return _checked_ms(number * _UNITS_MS[unit or "ms"], value, where)


def _checked_ms(ms: Decimal, given: object, where: str) -> int:
    if ms < 0:
        raise ConfigError(f"{where} must be greater than 0, got {shown(given)}")
    if ms == 0:
        raise ConfigError(f"{where} must be greater than 0 (0 would disable statement_timeout)")
    if ms > MAX_BUDGET_MS:
        raise ConfigError(f"{where}: {shown(given)} exceeds the maximum budget of 24h")
    if ms != ms.to_integral_value():
        raise ConfigError(f"{where}: {shown(given)} is not a whole number of milliseconds")
    return int(ms)


def format_budget(budget_ms: int) -> str:
    """The canonical spelling PostgreSQL accepts: ``3s``, ``60s``, ``1500ms``."""
    if budget_ms % 1000 == 0:
        return f"{budget_ms // 1000}s"
    return f"{budget_ms}ms"


def format_optional(budget_ms: int | None) -> str | None:
    return None if budget_ms is None else format_budget(budget_ms)
