"""Names in a cron_budgets declaration: functions, job names and schedules. Pure: no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

from psycopg import sql
from psycopg.abc import AdaptContext

from leaseguard.core.budgets.units import shown
from leaseguard.core.config_values import MAX_IDENTIFIER_BYTES
from leaseguard.core.errors import ConfigError

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*", re.ASCII)
_IDENTIFIER_CHARS = re.compile(r"[a-z0-9_.]", re.ASCII)
_JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*", re.ASCII)
_FUNCTION_EXAMPLE = "public.claim_stats_projection_job_v1"


@dataclass(frozen=True)
class FunctionName:
    """A function, schema-qualified when declared; `schema` is None only for a live command."""

    schema: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name

    def identifier(self) -> sql.Identifier:
        parts = (self.schema, self.name) if self.schema else (self.name,)
        return sql.Identifier(*parts)

    def quoted(self, context: AdaptContext | None = None) -> str:
        """The identifier quoted by psycopg (``"public"."f"``); needs no connection."""
        return self.identifier().as_string(context)


def parse_function_name(value: object, *, where: str) -> FunctionName:
    """`schema.name`, both parts lower-case identifiers; ConfigError naming `where` otherwise.

    Unquoted names are folded to lower case by PostgreSQL, so only lower-case names mean the
    same thing quoted and unquoted; anything else (quotes, spaces, parentheses, semicolons)
    is refused rather than quoted into a different function.
    """
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{where} must be a schema-qualified function name such as {_FUNCTION_EXAMPLE}"
        )
    for char in value:
        if not _IDENTIFIER_CHARS.fullmatch(char):
            raise ConfigError(
                f"{where} = {shown(value)} contains {char!r}: a function name is schema.name "
                "in lower-case letters, digits and _ (no quotes, spaces, parentheses or "
                "semicolons)"
            )
    parts = value.split(".")
    if len(parts) != 2:
        raise ConfigError(
            f"{where} = {shown(value)} must be schema-qualified as schema.name, "
            f"e.g. {_FUNCTION_EXAMPLE}"
        )
    for part in parts:
        if not _IDENTIFIER.fullmatch(part):
            raise ConfigError(
                f"{where} = {shown(value)}: {part!r} is not an identifier "
                "(a lower-case letter or _ first, then letters, digits or _)"
            )
        if len(part.encode()) > MAX_IDENTIFIER_BYTES:
            raise ConfigError(
                f"{where} = {shown(value)}: {part[:20]!r}... is longer than "
                f"{MAX_IDENTIFIER_BYTES} bytes; PostgreSQL would truncate it"
            )
    return FunctionName(parts[0], parts[1])


def parse_job_name(value: object, *, where: str) -> str:
    if (
        not isinstance(value, str)
        or not _JOB_NAME.fullmatch(value)
        or len(value) > MAX_IDENTIFIER_BYTES
    ):
        raise ConfigError(
            f"{where}: job name {shown(value)} must be 1-63 characters of letters, digits "
            "and _ . : - (not starting with . : -)"
        )
    return value


def parse_schedule(value: object, *, where: str) -> str:
    """A cron schedule, whitespace-normalised; pg_cron itself judges the syntax on write."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a cron schedule such as '* * * * *'")
    if any(ord(c) < 0x20 and not c.isspace() for c in value) or len(value) > 200:
        raise ConfigError(f"{where} = {shown(value)} is not a cron schedule")
    return normalise_schedule(value)


def normalise_schedule(schedule: str) -> str:
    """Fields separated by single spaces: equal schedules compare equal."""
    return " ".join(schedule.split())
