"""The ``cron_budgets`` declaration (jobs, per-environment overrides) and the one command every
job runs, read back by a small parser: anything else is refused, reported, never rewritten."""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

from psycopg import sql

from leaseguard.core.config_values import MAX_IDENTIFIER_BYTES, reject_unknown
from leaseguard.core.contract import CRON_BUDGETS_SECTION, load_config_file
from leaseguard.core.errors import ConfigError

# A cron step's budget beyond a day is a unit mistake (ms written as s), not a budget.
MAX_BUDGET_MS = 86_400_000
_UNITS_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_BUDGET = re.compile(r"\s*([-+]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*", re.ASCII)
_EXAMPLES = "such as 3s, 1500ms or 1min"
_JOB_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.:-]{{0,{MAX_IDENTIFIER_BYTES - 1}}}")
_FN_EXAMPLE = "public.claim_stats_projection_job_v1"


def shown(value: object) -> str:
    return text if len(text := repr(value)) <= 40 else text[:36] + "...'"


def parse_budget_ms(value: object, *, where: str) -> int:
    """``"3s"``, ``"1.5s"``, ``"2 min"``, ``3000`` (ms) as whole ms (statement_timeout's unit)."""
    expected = f"{where}: expected a statement budget {_EXAMPLES}, got {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(expected)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = format(Decimal(value), "f") if isinstance(value, float) else str(value)  # exact
    if not text.strip():
        raise ConfigError(f"{where} is empty: give a statement budget {_EXAMPLES}")
    if (match := _BUDGET.fullmatch(text)) is None:
        raise ConfigError(expected)
    sign, number, unit = match.groups()
    number, got = Decimal(number), shown(value)
    if unit and unit not in _UNITS_MS:
        raise ConfigError(f"{where}: unknown unit {unit!r} in {got}; use ms, s, min, h or d")
    if not unit and number != number.to_integral_value():
        raise ConfigError(f"{where}: a bare number means milliseconds and must be whole, got {got}")
    if sign == "-" and number:
        raise ConfigError(f"{where} must be greater than 0, got {got}")
    ms = number * _UNITS_MS[unit or "ms"]
    if ms == 0:
        raise ConfigError(f"{where} must be greater than 0 (0 would disable statement_timeout)")
    if ms > MAX_BUDGET_MS:
        raise ConfigError(f"{where}: {got} exceeds the maximum budget of 24h")
    if ms != ms.to_integral_value():
        raise ConfigError(f"{where}: {got} is not a whole number of milliseconds")
    return int(ms)


def format_budget(budget_ms: int) -> str:
    return f"{budget_ms // 1000}s" if budget_ms % 1000 == 0 else f"{budget_ms}ms"


def format_optional(budget_ms: int | None) -> str | None:
    return None if budget_ms is None else format_budget(budget_ms)


@dataclass(frozen=True)
class FunctionName:
    """A function, schema-qualified when declared; `schema` is None only for a live command."""

    schema: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def parse_function_name(value: object, *, where: str) -> FunctionName:
    """`schema.name` in lower case: only such names mean the same quoted and unquoted, so
    anything else (quotes, spaces, parentheses, semicolons) is refused, not quoted."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where} must be a schema-qualified function name such as {_FN_EXAMPLE}")
    named = f"{where} = {shown(value)}"
    if bad := re.search(r"[^a-z0-9_.]", value, re.ASCII):
        raise ConfigError(
            f"{named} contains {bad[0]!r}: a function name is schema.name in lower-case "
            "letters, digits and _ (no quotes, spaces, parentheses or semicolons)"
        )
    parts = value.split(".")
    if len(parts) != 2:
        raise ConfigError(f"{named} must be schema-qualified as schema.name, e.g. {_FN_EXAMPLE}")
    for part in parts:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", part):
            raise ConfigError(
                f"{named}: {part!r} is not an identifier "
                "(a lower-case letter or _ first, then letters, digits or _)"
            )
        if len(part) > MAX_IDENTIFIER_BYTES:
            raise ConfigError(
                f"{named}: {part[:20]!r}... is longer than {MAX_IDENTIFIER_BYTES} bytes; "
                "PostgreSQL would truncate it"
            )
    return FunctionName(parts[0], parts[1])


def render_command(function: FunctionName, budget_ms: int) -> str:
    """The job's command: ``set statement_timeout = '3s'; select "public"."f"();``."""
    if isinstance(budget_ms, bool) or not 0 < budget_ms <= MAX_BUDGET_MS:
        raise ConfigError(f"budget of {function} must be 1..{MAX_BUDGET_MS} ms")
    name = sql.Identifier(*filter(None, (function.schema, function.name)))
    command = sql.SQL("set statement_timeout = {}; select {}();")
    return command.format(sql.Literal(format_budget(budget_ms)), name).as_string(None)


class UnparseableCommand(ValueError):
    """A live command outside the grammar below; such a job is never rewritten."""


_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<qident>"(?:[^"]|"")+")
      | (?P<string>'(?:[^']|'')*')
      | (?P<number>[0-9]+(?:\.[0-9]+)?)
      | (?P<punct>[;=.()])
      | (?P<bad>.)""",
    re.VERBOSE | re.ASCII | re.DOTALL,
)
_GRAMMAR = "only [SET statement_timeout = <budget>;] SELECT <function>(); is understood"


def parse_live_command(command: str) -> tuple[int | None, FunctionName]:
    """``[SET [SESSION] statement_timeout =|TO value;] SELECT f()[;]``: (budget_ms or None, f)."""

    def refuse(reason: str) -> NoReturn:
        raise UnparseableCommand(f"{reason}: {_GRAMMAR}")

    found = [(m.lastgroup or "", m.group(), m.start()) for m in _TOKEN.finditer(command)]
    if bad := next((token for token in found if token[0] == "bad"), None):
        refuse(f"unexpected character {bad[1]!r} at offset {bad[2]}")
    # (kind, text, offset), the next one last; "end" where the command ends.
    tokens = [("end", "", len(command)), *(t for t in reversed(found) if t[0] != "ws")]

    def take(what: str, *accept: str, kinds: tuple[str, ...] = ()) -> tuple[str, str, int]:
        kind, text, offset = token = tokens.pop()
        if (accept and text.lower() not in accept) or (kinds and kind not in kinds):
            if kind == "end":
                refuse(f"the command ends where {what} was expected")
            seen = "a string literal" if kind == "string" else shown(text)  # a secret?
            refuse(f"expected {what} at offset {offset}, found {seen}")
        return token

    def optional(word: str) -> bool:  # only a word's text is `word`: quoted ones keep quotes
        return bool(tokens[-1][1].lower() == word and tokens.pop())

    def identifier() -> str:
        kind, text, _ = take("a function name", kinds=("word", "qident"))
        return text.lower() if kind == "word" else text[1:-1].replace('""', '"')  # PG folds

    budget_ms = None
    if optional("set"):
        if optional("local"):
            refuse("SET LOCAL is not understood")
        optional("session")
        text = take("statement_timeout", kinds=("word", "qident"))[1]
        if text.lower() != "statement_timeout":
            refuse(f"the command sets {shown(text)}, not statement_timeout")
        take("'=' or TO", "=", "to")
        kind, text, _ = take("a statement_timeout value", kinds=("string", "number"))
        value = text[1:-1].replace("''", "'") if kind == "string" else text
        try:
            budget_ms = parse_budget_ms(value, where="statement_timeout")
        except ConfigError as exc:
            number = _BUDGET.fullmatch(value)
            if number is None or number[3] not in ("", *_UNITS_MS):  # an unknown unit: a secret?
                refuse(
                    f"statement_timeout is set to a string literal that is not a budget {_EXAMPLES}"
                )
            raise UnparseableCommand(str(exc)) from None
        take("';' after SET", ";")
    take("SELECT", "select")
    function = FunctionName(None, identifier())
    if optional("."):
        function = FunctionName(function.name, identifier())
    take("'(' (a call without arguments)", "(")
    take("')' (a call without arguments)", ")")
    optional(";")
    take("the end of the command", kinds=("end",))
    return budget_ms, function


SECTION_KEYS = frozenset({"jobs", "overrides", "database"})
JOB_KEYS = frozenset({"schedule", "function", "budget"})


@dataclass(frozen=True)
class DeclaredJob:
    name: str
    schedule: str
    function: FunctionName
    budget_ms: int  # the one a run writes
    default_budget_ms: int
    source_label: str = "default"  # or override:<environment>

    @property
    def command(self) -> str:
        return render_command(self.function, self.budget_ms)


@dataclass(frozen=True)
class BudgetConfig:
    jobs: tuple[DeclaredJob, ...]
    overrides: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    database: str | None = None  # where the jobs run (None: cron's)
    environment: str | None = None

    def declare(self, environment: str | None = None) -> "BudgetConfig":
        """The jobs with `environment`'s overrides applied; without any, the defaults."""
        if environment is not None and (not isinstance(environment, str) or not environment):
            raise ConfigError("environment must be a non-empty string")
        chosen = self.overrides.get(environment, {}) if environment else {}
        jobs = tuple(
            replace(job, budget_ms=chosen[job.name], source_label=f"override:{environment}")
            if job.name in chosen
            else job
            for job in self.jobs
        )
        return replace(self, jobs=jobs, environment=environment)


def budget_config_from_mapping(data: Mapping[str, Any] | None) -> BudgetConfig:
    """``jobs``: name -> ``{schedule, function, budget}`` (or a list with ``name``s);
    ``overrides``: environment -> ``{job: budget}``."""
    prefix, data = CRON_BUDGETS_SECTION, {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix} must be a mapping")
    reject_unknown(data, SECTION_KEYS, prefix=f"{prefix}.")
    if isinstance(raw_jobs := data.get("jobs"), list | tuple):
        if not all(isinstance(entry, Mapping) and "name" in entry for entry in raw_jobs):
            raise ConfigError(f"{prefix}.jobs: every list entry needs a name")
        items = [(e["name"], {k: v for k, v in e.items() if k != "name"}) for e in raw_jobs]
    elif isinstance(raw_jobs, Mapping | None):
        items = list((raw_jobs or {}).items())
    else:
        raise ConfigError(f"{prefix}.jobs must map a job name to {{schedule, function, budget}}")
    jobs: dict[str, DeclaredJob] = {}
    for name, spec in items:
        if not isinstance(name, str) or not _JOB_NAME.fullmatch(name):
            raise ConfigError(
                f"{prefix}.jobs: job name {shown(name)} must be 1-63 characters of letters, "
                "digits and _ . : - (not starting with . : -)"
            )
        where = f"{prefix}.jobs.{name}"
        if name in jobs:
            raise ConfigError(f"{where} is declared twice")
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be a mapping with schedule, function and budget")
        reject_unknown(spec, JOB_KEYS, prefix=f"{where}.")
        for key in ("schedule", "function", "budget"):
            if spec.get(key) is None:
                raise ConfigError(f"{where}.{key} is required")
        schedule = spec["schedule"]
        if not isinstance(schedule, str) or not schedule.strip():
            raise ConfigError(f"{where}.schedule must be a cron schedule such as '* * * * *'")
        if any(ord(c) < 0x20 and not c.isspace() for c in schedule) or len(schedule) > 200:
            raise ConfigError(f"{where}.schedule = {shown(schedule)} is not a cron schedule")
        function = parse_function_name(spec["function"], where=f"{where}.function")
        budget_ms = parse_budget_ms(spec["budget"], where=f"{where}.budget")
        # Whitespace-normalised; pg_cron itself judges the syntax on write.
        schedule = " ".join(schedule.split())
        jobs[name] = DeclaredJob(name, schedule, function, budget_ms, budget_ms)
    if not jobs:
        raise ConfigError(f"{prefix}.jobs must declare at least one job")
    overrides: dict[str, dict[str, int]] = {}
    if not isinstance(raw_overrides := data.get("overrides") or {}, Mapping):
        raise ConfigError(f"{prefix}.overrides must map an environment to {{job: budget}}")
    for env, budgets in raw_overrides.items():
        where = f"{prefix}.overrides.{env}"
        if not isinstance(env, str) or not env:
            raise ConfigError(f"{prefix}.overrides: environment names must be non-empty strings")
        if budgets is not None and not isinstance(budgets, Mapping):
            raise ConfigError(f"{where} must map a job name to a budget")
        overrides[env] = {}
        for job, budget in (budgets or {}).items():
            if job not in jobs:
                raise ConfigError(
                    f"{where}.{job} overrides a job that is not declared in {prefix}.jobs"
                )
            overrides[env][job] = parse_budget_ms(budget, where=f"{where}.{job}")
    database = data.get("database")
    named = isinstance(database, str) and "\x00" not in database
    if database is not None and not (named and 0 < len(database.encode()) <= MAX_IDENTIFIER_BYTES):
        raise ConfigError(f"{prefix}.database must be a database name (1-63 bytes)")
    return BudgetConfig(tuple(jobs.values()), overrides, database)


def load_budget_config(path: str | Path) -> BudgetConfig:
    """The ``cron_budgets`` section of a YAML file (top level or under ``leaseguard:``)."""
    section = load_config_file(path)
    if CRON_BUDGETS_SECTION not in section:
        raise ConfigError(f"config file {path} has no {CRON_BUDGETS_SECTION} section")
    return budget_config_from_mapping(section[CRON_BUDGETS_SECTION])


def task_budgets(jobs: object, overrides: object, environment: str | None) -> BudgetConfig | None:
    """A cron_budget task's jobs and `environment`'s overrides; None when it declares none."""
    if jobs is None:
        if overrides:
            raise ConfigError("overrides without jobs: declare the jobs they override")
        return None
    if overrides and environment is None:
        raise ConfigError(
            "overrides need environment: the environment they belong to (e.g. production) "
            "is named in every report and warning"
        )
    section: dict[str, object] = {"jobs": jobs}
    if environment is not None:
        section["overrides"] = {environment: overrides or {}}
    return budget_config_from_mapping(section).declare(environment)
