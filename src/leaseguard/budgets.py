"""pg_cron statement budgets: declare them per environment, converge without silent reverts.

Each job of the claim / compute / publish pipeline runs from pg_cron as ONE command, rendered
from ONE template::

    set statement_timeout = '3s'; select "public"."claim_stats_projection_job_v1"();

The budget is part of the job's command, so a deploy that rewrites commands can silently
revert a deliberate production budget (publish = 6 s) to the code's default (3 s). Hence:

* a budget declared by a per-environment override wins over the default and is written;
* a live budget that differs from a *default* is drift: reported, never overwritten unless
  the caller asks for it (``on_drift="apply"``), because nothing tells us whether the live
  value is an accident or a production fix nobody declared yet;
* lowering a live budget is always reported, also when it is applied;
* a live command this module does not fully understand is refused, never rewritten.

The layers: `parse_budget_ms`, `parse_function_name` and `budget_config_from_mapping` validate
input (ConfigError naming the job and key); `render_command` and `parse_live_command` go
between a (budget, function) pair and pg_cron's command text; `plan_budgets` is the pure
decision; `apply_budgets` reads ``cron.job`` and writes the plan in one transaction.

Budgets follow PostgreSQL's ``statement_timeout``: a bare number means milliseconds, units are
spelt as PostgreSQL spells them (``ms``, ``s``, ``min``, ``h``, ``d``; case-sensitive), and the
canonical form is whole seconds when exact (``3s``, ``60s``) and milliseconds otherwise
(``1500ms``). Canonical values need no quoting beyond the template's own quotes.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, NoReturn

import jinja2
import psycopg
from psycopg import sql
from psycopg.abc import AdaptContext
from psycopg.conninfo import make_conninfo

from leaseguard.contract import CRON_BUDGETS_SECTION, Contract, load_config_file
from leaseguard.cron import (
    LiveJob,
    cron_transaction,
    read_live_jobs,
)
from leaseguard.db import connect, invalid_dsn
from leaseguard.errors import ConfigError, DatabaseUnavailable

CONFIG_SECTION = CRON_BUDGETS_SECTION

# statement_timeout is an int of milliseconds in PostgreSQL (max ~24.8 days). A cron step's
# budget beyond a day is a unit mistake (milliseconds written as seconds), not a budget.
MAX_BUDGET_MS = 86_400_000

# The one template every job's command is rendered from. It receives values that are already
# safe: a canonical budget (digits + "s"/"ms") and an identifier quoted by psycopg.sql.
COMMAND_TEMPLATE = "set statement_timeout = '{{ budget }}'; select {{ function }}();"

# Autoescape is for HTML; this renders SQL from pre-validated, pre-quoted parts, and
# StrictUndefined makes a missing part an error instead of an empty string.
_JINJA = jinja2.Environment(
    autoescape=False,  # noqa: S701
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=False,
)
_COMMAND = _JINJA.from_string(COMMAND_TEMPLATE)

OnDrift = Literal["report", "apply"]
ON_DRIFT_CHOICES: tuple[OnDrift, ...] = ("report", "apply")

# Serialises concurrent runs (two deploys) between reading cron.job and writing it;
# the bytes of "lgcronbg" as a bigint.
_ADVISORY_LOCK_KEY = 0x6C67_6372_6F6E_6267

_MAX_IDENTIFIER_BYTES = 63
_SHOWN_CHARS = 40


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 4] + "...'"


# --- budgets --------------------------------------------------------------------------------

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
        raise ConfigError(f"{where}: expected a statement budget {_EXAMPLES}, got {_shown(value)}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(
                f"{where}: expected a statement budget {_EXAMPLES}, got {_shown(value)}"
            )
        if value != int(value):
            raise ConfigError(
                f"{where}: a bare number means milliseconds and must be whole, got {_shown(value)}"
            )
        value = int(value)
    if isinstance(value, int):
        return _checked_ms(Decimal(value), value, where)
    if not value.strip():
        raise ConfigError(f"{where} is empty: give a statement budget {_EXAMPLES}")
    match = _BUDGET.fullmatch(value)
    if match is None:
        raise ConfigError(f"{where}: expected a statement budget {_EXAMPLES}, got {_shown(value)}")
    unit = match["unit"]
    if unit and unit not in _UNITS_MS:
        raise ConfigError(
            f"{where}: unknown unit {unit!r} in {_shown(value)}; use ms, s, min, h or d"
        )
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal digits
        raise ConfigError(f"{where}: expected a statement budget {_EXAMPLES}") from None
    if not unit and number != number.to_integral_value():
        raise ConfigError(
            f"{where}: a bare number means milliseconds and must be whole, got {_shown(value)}"
        )
    if match["sign"] == "-" and number:
        raise ConfigError(f"{where} must be greater than 0, got {_shown(value)}")
    return _checked_ms(number * _UNITS_MS[unit or "ms"], value, where)


def _checked_ms(ms: Decimal, shown: object, where: str) -> int:
    if ms < 0:
        raise ConfigError(f"{where} must be greater than 0, got {_shown(shown)}")
    if ms == 0:
        raise ConfigError(f"{where} must be greater than 0 (0 would disable statement_timeout)")
    if ms > MAX_BUDGET_MS:
        raise ConfigError(f"{where}: {_shown(shown)} exceeds the maximum budget of 24h")
    if ms != ms.to_integral_value():
        raise ConfigError(f"{where}: {_shown(shown)} is not a whole number of milliseconds")
    return int(ms)


def format_budget(budget_ms: int) -> str:
    """The canonical spelling PostgreSQL accepts: ``3s``, ``60s``, ``1500ms``."""
    if budget_ms % 1000 == 0:
        return f"{budget_ms // 1000}s"
    return f"{budget_ms}ms"


def _format_optional(budget_ms: int | None) -> str | None:
    return None if budget_ms is None else format_budget(budget_ms)


# --- names ----------------------------------------------------------------------------------

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
                f"{where} = {_shown(value)} contains {char!r}: a function name is schema.name "
                "in lower-case letters, digits and _ (no quotes, spaces, parentheses or "
                "semicolons)"
            )
    parts = value.split(".")
    if len(parts) != 2:
        raise ConfigError(
            f"{where} = {_shown(value)} must be schema-qualified as schema.name, "
            f"e.g. {_FUNCTION_EXAMPLE}"
        )
    for part in parts:
        if not _IDENTIFIER.fullmatch(part):
            raise ConfigError(
                f"{where} = {_shown(value)}: {part!r} is not an identifier "
                "(a lower-case letter or _ first, then letters, digits or _)"
            )
        if len(part.encode()) > _MAX_IDENTIFIER_BYTES:
            raise ConfigError(
                f"{where} = {_shown(value)}: {part[:20]!r}... is longer than "
                f"{_MAX_IDENTIFIER_BYTES} bytes; PostgreSQL would truncate it"
            )
    return FunctionName(parts[0], parts[1])


def _job_name(value: object, *, where: str) -> str:
    if (
        not isinstance(value, str)
        or not _JOB_NAME.fullmatch(value)
        or len(value) > _MAX_IDENTIFIER_BYTES
    ):
        raise ConfigError(
            f"{where}: job name {_shown(value)} must be 1-63 characters of letters, digits "
            "and _ . : - (not starting with . : -)"
        )
    return value


def _schedule(value: object, *, where: str) -> str:
    """A cron schedule, whitespace-normalised; pg_cron itself judges the syntax on write."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a cron schedule such as '* * * * *'")
    if any(ord(c) < 0x20 and not c.isspace() for c in value) or len(value) > 200:
        raise ConfigError(f"{where} = {_shown(value)} is not a cron schedule")
    return normalise_schedule(value)


def normalise_schedule(schedule: str) -> str:
    """Fields separated by single spaces: equal schedules compare equal."""
    return " ".join(schedule.split())


# --- the command -----------------------------------------------------------------------------


def render_command(
    function: FunctionName, budget_ms: int, context: AdaptContext | None = None
) -> str:
    """The job's command from COMMAND_TEMPLATE, with psycopg quoting the function name."""
    if isinstance(budget_ms, bool) or not 0 < budget_ms <= MAX_BUDGET_MS:
        raise ConfigError(f"budget of {function} must be 1..{MAX_BUDGET_MS} ms")
    return _COMMAND.render(budget=format_budget(budget_ms), function=function.quoted(context))


@dataclass(frozen=True)
class ParsedCommand:
    """What a live command does: its statement budget (None: none set) and the function."""

    budget_ms: int | None
    function: FunctionName


class UnparseableCommand(ValueError):
    """A live command outside the narrow grammar this module understands; never rewritten."""


_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<qident>"(?:[^"]|"")+")
      | (?P<string>'(?:[^']|'')*')
      | (?P<number>[0-9]+(?:\.[0-9]+)?)
      | (?P<punct>[;=.()])""",
    re.VERBOSE | re.ASCII,
)
_GRAMMAR = "only [SET statement_timeout = <budget>;] SELECT <function>(); is understood"


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    offset: int

    @property
    def word(self) -> str | None:
        return self.text.lower() if self.kind == "word" else None


def _tokens(command: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(command):
        match = _TOKEN.match(command, pos)
        if match is None:
            raise UnparseableCommand(
                f"unexpected character {command[pos]!r} at offset {pos}: {_GRAMMAR}"
            )
        kind = match.lastgroup or ""
        if kind != "ws":
            tokens.append(_Token(kind, match.group(), pos))
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent over the two-statement grammar; anything else is refused."""

    def __init__(self, command: str) -> None:
        self.tokens = _tokens(command)
        self.pos = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise UnparseableCommand(f"the command ends where {what} was expected: {_GRAMMAR}")
        self.pos += 1
        return token

    def expect(self, kind: str, text: str, what: str) -> None:
        token = self.take(what)
        if token.kind != kind or token.text.lower() != text:
            self.unexpected(token, what)

    def unexpected(self, token: _Token, what: str) -> NoReturn:
        raise UnparseableCommand(
            f"expected {what} at offset {token.offset}, found {_shown(token.text)}: {_GRAMMAR}"
        )

    def parse(self) -> ParsedCommand:
        budget_ms = None
        first = self.peek()
        if first is not None and first.word == "set":
            budget_ms = self.set_statement()
        self.expect("word", "select", "SELECT")
        function = self.function_name()
        self.expect("punct", "(", "'(' (a call without arguments)")
        self.expect("punct", ")", "')' (a call without arguments)")
        token = self.peek()
        if token is not None and token.text == ";":
            self.pos += 1
        token = self.peek()
        if token is not None:
            self.unexpected(token, "the end of the command")
        return ParsedCommand(budget_ms, function)

    def set_statement(self) -> int:
        self.pos += 1
        token = self.take("statement_timeout")
        if token.word == "local":
            raise UnparseableCommand(f"SET LOCAL is not understood: {_GRAMMAR}")
        if token.word == "session":
            token = self.take("statement_timeout")
        if token.word != "statement_timeout":
            raise UnparseableCommand(
                f"the command sets {_shown(token.text)}, not statement_timeout: {_GRAMMAR}"
            )
        token = self.take("'=' or TO")
        if token.text != "=" and token.word != "to":
            self.unexpected(token, "'=' or TO")
        value = self.take("a statement_timeout value")
        if value.kind == "string":
            text = value.text[1:-1].replace("''", "'")
        elif value.kind == "number":
            text = value.text
        else:
            self.unexpected(value, "a statement_timeout value")
        try:
            budget_ms = parse_budget_ms(text, where="statement_timeout")
        except ConfigError as exc:
            raise UnparseableCommand(str(exc)) from None
        self.expect("punct", ";", "';' after SET")
        return budget_ms

    def function_name(self) -> FunctionName:
        first = self.identifier()
        token = self.peek()
        if token is None or token.text != ".":
            return FunctionName(None, first)
        self.pos += 1
        return FunctionName(first, self.identifier())

    def identifier(self) -> str:
        token = self.take("a function name")
        if token.kind == "word":
            return token.text.lower()  # PostgreSQL folds unquoted names
        if token.kind == "qident":
            return token.text[1:-1].replace('""', '"')
        self.unexpected(token, "a function name")


def parse_live_command(command: str) -> ParsedCommand:
    """(budget, function) of a pg_cron command; UnparseableCommand for anything else.

    Tolerated: keyword case, spacing, ``=`` or ``TO``, a quoted or bare value, quoted or bare
    identifiers, a trailing semicolon. Refused: other SETs, more statements, arguments,
    comments, anything not in the grammar -- such a job is reported and left untouched.
    """
    return _Parser(command).parse()


# --- declarations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    """One job as the code declares it (the default budget)."""

    name: str
    schedule: str
    function: FunctionName
    budget_ms: int


@dataclass(frozen=True)
class DeclaredJob:
    """A job with the budget this run would write, and where that budget comes from."""

    name: str
    schedule: str
    function: FunctionName
    budget_ms: int
    default_budget_ms: int
    source: Literal["default", "override"] = "default"
    environment: str | None = None

    @property
    def source_label(self) -> str:
        """``default`` or ``override:<environment>``."""
        return f"override:{self.environment}" if self.source == "override" else "default"

    @property
    def command(self) -> str:
        return render_command(self.function, self.budget_ms)


@dataclass(frozen=True)
class DeclaredBudgets:
    """The declared jobs of one environment; `database`: where the jobs run (None: cron's)."""

    jobs: tuple[DeclaredJob, ...]
    environment: str | None = None
    database: str | None = None


@dataclass(frozen=True)
class BudgetConfig:
    """The ``cron_budgets`` section: default jobs plus per-environment budget overrides."""

    jobs: tuple[JobSpec, ...]
    overrides: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    database: str | None = None

    def declare(self, environment: str | None = None) -> DeclaredBudgets:
        """The jobs with `environment`'s overrides applied (they win over the defaults).

        An environment without overrides (e.g. staging) simply keeps the defaults.
        """
        if environment is not None and (not isinstance(environment, str) or not environment):
            raise ConfigError("environment must be a non-empty string")
        chosen = self.overrides.get(environment, {}) if environment else {}
        jobs = []
        for spec in self.jobs:
            override = chosen.get(spec.name)
            jobs.append(
                DeclaredJob(
                    name=spec.name,
                    schedule=spec.schedule,
                    function=spec.function,
                    budget_ms=spec.budget_ms if override is None else override,
                    default_budget_ms=spec.budget_ms,
                    source="default" if override is None else "override",
                    environment=environment if override is not None else None,
                )
            )
        return DeclaredBudgets(tuple(jobs), environment, self.database)


_SECTION_KEYS = frozenset({"jobs", "overrides", "database"})
_JOB_KEYS = frozenset({"schedule", "function", "budget"})


def budget_config_from_mapping(data: Mapping[str, Any] | None) -> BudgetConfig:
    """Validate a ``cron_budgets`` mapping; every message names the job and the key.

    ``jobs`` is a mapping of job name to ``{schedule, function, budget}`` (or a list of such
    mappings with a ``name``); ``overrides`` maps an environment to ``{job: budget}``;
    ``database`` optionally names the database the jobs run in.
    """
    prefix = CONFIG_SECTION
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix} must be a mapping")
    _reject_unknown(data, _SECTION_KEYS, f"{prefix}.")
    specs = tuple(_job_specs(data.get("jobs"), f"{prefix}.jobs"))
    if not specs:
        raise ConfigError(f"{prefix}.jobs must declare at least one job")
    names = {spec.name for spec in specs}
    overrides: dict[str, dict[str, int]] = {}
    raw_overrides = data.get("overrides") or {}
    if not isinstance(raw_overrides, Mapping):
        raise ConfigError(f"{prefix}.overrides must map an environment to {{job: budget}}")
    for env, budgets in raw_overrides.items():
        where = f"{prefix}.overrides.{env}"
        if not isinstance(env, str) or not env:
            raise ConfigError(f"{prefix}.overrides: environment names must be non-empty strings")
        overrides[env] = {}
        if budgets is None:
            continue
        if not isinstance(budgets, Mapping):
            raise ConfigError(f"{where} must map a job name to a budget")
        for job, budget in budgets.items():
            if job not in names:
                raise ConfigError(
                    f"{where}.{job} overrides a job that is not declared in {prefix}.jobs"
                )
            overrides[env][job] = parse_budget_ms(budget, where=f"{where}.{job}")
    database = data.get("database")
    if database is not None and (
        not isinstance(database, str)
        or not database
        or "\x00" in database
        or len(database.encode()) > _MAX_IDENTIFIER_BYTES
    ):
        raise ConfigError(f"{prefix}.database must be a database name (1-63 bytes)")
    return BudgetConfig(specs, overrides, database)


def _job_specs(jobs: object, prefix: str) -> Iterable[JobSpec]:
    if jobs is None:
        return
    items: list[tuple[object, object]]
    if isinstance(jobs, Mapping):
        items = list(jobs.items())
    elif isinstance(jobs, list | tuple):
        items = []
        for entry in jobs:
            if not isinstance(entry, Mapping) or "name" not in entry:
                raise ConfigError(f"{prefix}: every list entry needs a name")
            items.append((entry["name"], {k: v for k, v in entry.items() if k != "name"}))
    else:
        raise ConfigError(f"{prefix} must map a job name to {{schedule, function, budget}}")
    seen: set[str] = set()
    for raw_name, spec in items:
        name = _job_name(raw_name, where=prefix)
        where = f"{prefix}.{name}"
        if name in seen:
            raise ConfigError(f"{where} is declared twice")
        seen.add(name)
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be a mapping with schedule, function and budget")
        _reject_unknown(spec, _JOB_KEYS, f"{where}.")
        for key in ("schedule", "function", "budget"):
            if spec.get(key) is None:
                raise ConfigError(f"{where}.{key} is required")
        yield JobSpec(
            name=name,
            schedule=_schedule(spec["schedule"], where=f"{where}.schedule"),
            function=parse_function_name(spec["function"], where=f"{where}.function"),
            budget_ms=parse_budget_ms(spec["budget"], where=f"{where}.budget"),
        )


def _reject_unknown(data: Mapping[Any, Any], known: frozenset[str], prefix: str) -> None:
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(prefix + k for k in unknown)}")


def load_budget_config(path: str | Path) -> BudgetConfig:
    """The ``cron_budgets`` section of a YAML file (top level or under ``leaseguard:``)."""
    section = load_config_file(path)
    if CONFIG_SECTION not in section:
        raise ConfigError(f"config file {path} has no {CONFIG_SECTION} section")
    return budget_config_from_mapping(section[CONFIG_SECTION])


# --- planning (pure) --------------------------------------------------------------------------


class Action(enum.StrEnum):
    CREATE = "create"  # no live job of that name
    UPDATE = "update"  # schedule, function, database, or a declared override differs
    UNCHANGED = "unchanged"
    DRIFT = "drift"  # live budget differs from a default: reported, left as it is
    UNPARSEABLE = "unparseable"  # live command not understood: refused, left as it is
    AMBIGUOUS = "ambiguous"  # several live jobs share the name: refused, left as they are


_WRITES = (Action.CREATE, Action.UPDATE)


@dataclass(frozen=True)
class JobPlan:
    """The decision for one declared job, with what it changes and why."""

    job: DeclaredJob
    action: Action
    live: LiveJob | None = None
    parsed: ParsedCommand | None = None
    changes: tuple[str, ...] = ()  # of: schedule, function, budget, database
    reason: str = ""
    database: str | None = None  # where the job runs after this plan (None: not known)

    @property
    def live_budget_ms(self) -> int | None:
        return self.parsed.budget_ms if self.parsed else None

    @property
    def writes(self) -> bool:
        return self.action in _WRITES

    @property
    def new_schedule(self) -> str | None:
        """The schedule to write, None when it stays."""
        if self.action is Action.CREATE or "schedule" in self.changes:
            return self.job.schedule
        return None

    @property
    def new_command(self) -> str | None:
        """The rendered command to write, None when the live one stays."""
        if self.action is Action.CREATE or {"function", "budget"} & set(self.changes):
            return self.job.command
        return None

    @property
    def new_database(self) -> str | None:
        return self.database if "database" in self.changes else None

    def before(self) -> dict[str, Any] | None:
        if self.live is None:
            return None
        return {
            "jobid": self.live.jobid,
            "schedule": self.live.schedule,
            "command": self.live.command,
            "budget": _format_optional(self.live_budget_ms),
            "database": self.live.database,
            "active": self.live.active,
        }

    def after(self) -> dict[str, Any] | None:
        before = self.before()
        if not self.writes:
            return before
        after = dict(before or {"jobid": None, "active": True, "database": self.database})
        after["schedule"] = self.new_schedule or after["schedule"]
        after["command"] = self.new_command or after["command"]
        if self.new_command is not None:
            after["budget"] = format_budget(self.job.budget_ms)
        if self.new_database is not None:
            after["database"] = self.new_database
        return after

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "state": str(self.action),
            "live_budget": _format_optional(self.live_budget_ms),
            "declared_budget": format_budget(self.job.budget_ms),
            "default_budget": format_budget(self.job.default_budget_ms),
            "source": self.job.source_label,
            "function": str(self.job.function),
            "schedule": self.job.schedule,
            "changes": list(self.changes),
            "reason": self.reason,
            "before": self.before(),
            "after": self.after(),
        }


@dataclass(frozen=True)
class Drift:
    """A live budget that differs from a default-sourced declaration."""

    job: str
    live_budget_ms: int | None  # None: the live command sets no statement_timeout
    declared_budget_ms: int
    source: str
    applied: bool  # True when on_drift="apply" overwrites it

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "live": _format_optional(self.live_budget_ms),
            "declared": format_budget(self.declared_budget_ms),
            "source": self.source,
            "applied": self.applied,
        }


@dataclass(frozen=True)
class BudgetPlan:
    """Per-job decisions; `applied` is False for a plan that wrote nothing (check mode)."""

    jobs: tuple[JobPlan, ...]
    drift: tuple[Drift, ...]
    warnings: tuple[str, ...]
    environment: str | None = None
    on_drift: OnDrift = "report"
    applied: bool = False

    @property
    def changed(self) -> bool:
        """True when the plan creates or updates a job (the same in check mode)."""
        return any(job.writes for job in self.jobs)

    @property
    def converged(self) -> bool:
        """Every job matches its declaration (after this run's writes, when applied)."""
        return all(
            job.action is Action.UNCHANGED or (job.writes and self.applied) for job in self.jobs
        )

    def job(self, name: str) -> JobPlan:
        for job in self.jobs:
            if job.job.name == name:
                return job
        raise KeyError(name)

    def diff(self) -> dict[str, dict[str, Any]]:
        """Ansible's diff: ``before``/``after`` keyed by job name (absent job: empty)."""
        return {
            "before": {job.job.name: job.before() or {} for job in self.jobs},
            "after": {job.job.name: job.after() or {} for job in self.jobs},
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "on_drift": self.on_drift,
            "applied": self.applied,
            "changed": self.changed,
            "converged": self.converged,
            "jobs": [job.as_dict() for job in self.jobs],
            "drift": [drift.as_dict() for drift in self.drift],
            "warnings": list(self.warnings),
        }


def plan_budgets(
    declared: DeclaredBudgets, live: Sequence[LiveJob], *, on_drift: str = "report"
) -> BudgetPlan:
    """Decide, per declared job, create / update / unchanged / drift / refuse. Pure.

    :param declared: the jobs with the budgets this run would write (`BudgetConfig.declare`).
    :param live: cron.job rows; rows of undeclared names are ignored.
    :param on_drift: ``"report"`` leaves a drifted job untouched; ``"apply"`` overwrites it.
    """
    if on_drift not in ON_DRIFT_CHOICES:
        raise ConfigError(f"on_drift must be one of {', '.join(ON_DRIFT_CHOICES)}")
    policy: OnDrift = "apply" if on_drift == "apply" else "report"
    jobs: list[JobPlan] = []
    drift: list[Drift] = []
    warnings: list[str] = []
    for job in declared.jobs:
        matches = [row for row in live if row.name == job.name]
        plan = _plan_job(job, matches, declared.database, policy)
        jobs.append(plan)
        if "budget" in plan.changes and job.source == "default":
            drift.append(
                Drift(
                    job.name,
                    plan.live_budget_ms,
                    job.budget_ms,
                    job.source_label,
                    applied=plan.writes,
                )
            )
        warnings.extend(_warnings(plan))
    return BudgetPlan(tuple(jobs), tuple(drift), tuple(warnings), declared.environment, policy)


def _plan_job(
    job: DeclaredJob, matches: list[LiveJob], database: str | None, on_drift: OnDrift
) -> JobPlan:
    if not matches:
        return JobPlan(job, Action.CREATE, database=database, reason="no live job of this name")
    live = matches[0]
    if len(matches) > 1:
        ids = ", ".join(str(row.jobid) for row in matches)
        return JobPlan(
            job,
            Action.AMBIGUOUS,
            live,
            database=live.database,
            reason=f"{len(matches)} live pg_cron jobs share this name (jobids {ids})",
        )
    try:
        parsed = parse_live_command(live.command)
    except UnparseableCommand as exc:
        return JobPlan(job, Action.UNPARSEABLE, live, database=live.database, reason=str(exc))
    changes = []
    if normalise_schedule(live.schedule) != job.schedule:
        changes.append("schedule")
    if parsed.function != job.function:
        changes.append("function")
    if parsed.budget_ms != job.budget_ms:
        changes.append("budget")
    if database is not None and live.database != database:
        changes.append("database")
    target = database if database is not None else live.database
    if not changes:
        return JobPlan(job, Action.UNCHANGED, live, parsed, database=target)
    if "budget" in changes and job.source == "default" and on_drift == "report":
        others = [c for c in changes if c != "budget"]
        pending = f"; also pending: {', '.join(others)}" if others else ""
        return JobPlan(
            job,
            Action.DRIFT,
            live,
            parsed,
            tuple(changes),
            reason=f"live budget {_format_optional(parsed.budget_ms) or 'none'} differs from "
            f"the default {format_budget(job.budget_ms)} and no override declares it; "
            f"left untouched{pending}",
            database=live.database,
        )
    return JobPlan(
        job,
        Action.UPDATE,
        live,
        parsed,
        tuple(changes),
        reason=f"{', '.join(changes)} differ(s)",
        database=target,
    )


def _warnings(plan: JobPlan) -> list[str]:
    name = plan.job.name
    if plan.action is Action.UNPARSEABLE:
        return [f"job {name}: live command not understood ({plan.reason}); left untouched"]
    if plan.action is Action.AMBIGUOUS:
        return [f"job {name}: {plan.reason}; left untouched"]
    live = plan.live_budget_ms
    if plan.writes and "budget" in plan.changes and (live is None or plan.job.budget_ms < live):
        return [
            f"job {name}: lowering the live statement budget "
            f"{_format_optional(live) or 'none'} -> {format_budget(plan.job.budget_ms)} "
            f"(source {plan.job.source_label})"
        ]
    return []


# --- applying (I/O) ---------------------------------------------------------------------------


def connect_cron(
    conninfo: str, *, dbname: str | None = None, connect_timeout_s: int = 10
) -> psycopg.Connection[tuple[object, ...]]:
    """A writable autocommit connection to the database holding cron.job.

    Connection failures are reported as leaseguard.db reports them: the target
    (host:port/db) and a fixed phrase, never the DSN or the driver's text.
    """
    if dbname:
        try:
            conninfo = make_conninfo(conninfo, dbname=dbname)
        except psycopg.ProgrammingError:
            raise invalid_dsn(conninfo) from None
    conn = connect(conninfo, Contract(connect_timeout_s=connect_timeout_s))
    conn.read_only = False
    conn.isolation_level = None
    conn.autocommit = True
    return conn


def converge_budgets(
    conninfo: str,
    declared: DeclaredBudgets,
    *,
    cron_database: str | None = None,
    on_drift: str = "report",
    check_mode: bool = False,
    connect_timeout_s: int = 10,
) -> BudgetPlan:
    """Connect and `apply_budgets`: the whole run for a front that holds a DSN.

    :param conninfo: libpq DSN of the application database (the one the jobs run in).
    :param cron_database: the database holding cron.job (pg_cron's ``cron.database_name``)
        when it is not the DSN's; the jobs then run in `declared.database`, else in the
        DSN's own database.
    """
    if cron_database and declared.database is None:
        with connect_cron(conninfo, connect_timeout_s=connect_timeout_s) as conn:
            try:
                row = conn.execute("SELECT current_database()").fetchone()
            except psycopg.Error as exc:
                raise DatabaseUnavailable(
                    f"cannot read the name of the application database ({type(exc).__name__})"
                ) from None
            if row is not None:
                declared = replace(declared, database=str(row[0]))
    with connect_cron(conninfo, dbname=cron_database, connect_timeout_s=connect_timeout_s) as conn:
        return apply_budgets(conn, declared, on_drift=on_drift, check_mode=check_mode)


def apply_budgets(
    conn: psycopg.Connection[Any],
    declared: DeclaredBudgets,
    *,
    on_drift: str = "report",
    check_mode: bool = False,
) -> BudgetPlan:
    """Read cron.job, plan, and (unless `check_mode`) write the plan in one transaction.

    `conn` is connected to the database holding pg_cron's cron.job (`connect_cron`). Jobs are
    created in `declared.database`, or in that same database when it is None. In check mode
    the transaction is READ ONLY: the plan is computed exactly as it would be, nothing is
    written. Any failure rolls everything back and raises a DatabaseError naming the job.
    """
    if on_drift not in ON_DRIFT_CHOICES:
        raise ConfigError(f"on_drift must be one of {', '.join(ON_DRIFT_CHOICES)}")
    privilege = "grant the role EXECUTE on cron.schedule/alter_job" + (
        "/schedule_in_database" if declared.database else ""
    )
    with cron_transaction(conn, read_only=check_mode, privilege_hint=privilege) as step:
        if not check_mode:
            step.now = "waiting for another leaseguard run on cron.job"
            conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (_ADVISORY_LOCK_KEY,))
            step.now = "reading cron.job"
        row = conn.execute("SELECT current_database()").fetchone()
        here = str(row[0]) if row else conn.info.dbname
        target = replace(declared, database=declared.database or here)
        live = read_live_jobs(conn, [job.name for job in declared.jobs])
        plan = plan_budgets(target, live, on_drift=on_drift)
        if not check_mode:
            for job in plan.jobs:
                step.now = f"writing pg_cron job {job.job.name}"
                _write(conn, job, here)
    return replace(plan, applied=not check_mode)


def _write(conn: psycopg.Connection[Any], job: JobPlan, here: str) -> None:
    """One job's write; every value a bind parameter."""
    if job.action is Action.CREATE:
        if job.database in (None, here):
            conn.execute(
                "SELECT cron.schedule(%s, %s, %s)",
                (job.job.name, job.job.schedule, job.job.command),
            )
        else:
            conn.execute(
                "SELECT cron.schedule_in_database(%s, %s, %s, %s)",
                (job.job.name, job.job.schedule, job.job.command, job.database),
            )
    elif job.action is Action.UPDATE and job.live is not None:
        # NULL leaves a field as it is: an unchanged command keeps its live spelling.
        conn.execute(
            "SELECT cron.alter_job(%s::bigint, schedule := %s::text, command := %s::text, "
            "database := %s::text)",
            (job.live.jobid, job.new_schedule, job.new_command, job.new_database),
        )


__all__ = [
    "COMMAND_TEMPLATE",
    "CONFIG_SECTION",
    "MAX_BUDGET_MS",
    "ON_DRIFT_CHOICES",
    "Action",
    "BudgetConfig",
    "BudgetPlan",
    "DeclaredBudgets",
    "DeclaredJob",
    "Drift",
    "FunctionName",
    "JobPlan",
    "JobSpec",
    "LiveJob",
    "ParsedCommand",
    "UnparseableCommand",
    "apply_budgets",
    "budget_config_from_mapping",
    "connect_cron",
    "converge_budgets",
    "format_budget",
    "load_budget_config",
    "normalise_schedule",
    "parse_budget_ms",
    "parse_function_name",
    "parse_live_command",
    "plan_budgets",
    "read_live_jobs",
    "render_command",
]
