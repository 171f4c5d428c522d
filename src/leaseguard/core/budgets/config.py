"""The ``cron_budgets`` section: declared jobs and per-environment overrides, validated with
messages naming the job and key; `BudgetConfig.declare` gives one environment's budgets."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from leaseguard.core.budgets.command import (
    FunctionName,
    parse_budget_ms,
    parse_function_name,
    render_command,
    shown,
)
from leaseguard.core.config_values import MAX_IDENTIFIER_BYTES, reject_unknown
from leaseguard.core.contract import CRON_BUDGETS_SECTION, load_config_file
from leaseguard.core.errors import ConfigError

CONFIG_SECTION = CRON_BUDGETS_SECTION
SECTION_KEYS = frozenset({"jobs", "overrides", "database"})
JOB_KEYS = frozenset({"schedule", "function", "budget"})


@dataclass(frozen=True)
class DeclaredJob:
    """A job with the budget a run would write, and where that budget comes from."""

    name: str
    schedule: str
    function: FunctionName
    budget_ms: int
    default_budget_ms: int
    source: Literal["default", "override"] = "default"
    environment: str | None = None

    @property
    def source_label(self) -> str:
        return f"override:{self.environment}" if self.source == "override" else "default"

    @property
    def command(self) -> str:
        return render_command(self.function, self.budget_ms)


@dataclass(frozen=True)
class BudgetConfig:
    """The section: jobs with their default budgets, per-environment overrides, and `database`
    where the jobs run (None: cron's); `declare` gives one `environment`'s jobs."""

    jobs: tuple[DeclaredJob, ...]
    overrides: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    database: str | None = None
    environment: str | None = None

    def declare(self, environment: str | None = None) -> BudgetConfig:
        """The jobs with `environment`'s overrides applied; without any, the defaults."""
        if environment is not None and (not isinstance(environment, str) or not environment):
            raise ConfigError("environment must be a non-empty string")
        chosen = self.overrides.get(environment, {}) if environment else {}
        jobs = tuple(
            replace(job, budget_ms=chosen[job.name], source="override", environment=environment)
            if job.name in chosen
            else job
            for job in self.jobs
        )
        return replace(self, jobs=jobs, environment=environment)


def budget_config_from_mapping(data: Mapping[str, Any] | None) -> BudgetConfig:
    """``jobs``: job name -> ``{schedule, function, budget}`` (or a list of such with a
    ``name``); ``overrides``: environment -> ``{job: budget}``; ``database``: where jobs run."""
    prefix = CONFIG_SECTION
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix} must be a mapping")
    reject_unknown(data, SECTION_KEYS, prefix=f"{prefix}.")
    jobs = tuple(_jobs(data.get("jobs"), f"{prefix}.jobs"))
    if not jobs:
        raise ConfigError(f"{prefix}.jobs must declare at least one job")
    names = {job.name for job in jobs}
    overrides: dict[str, dict[str, int]] = {}
    raw_overrides = data.get("overrides") or {}
    if not isinstance(raw_overrides, Mapping):
        raise ConfigError(f"{prefix}.overrides must map an environment to {{job: budget}}")
    for env, budgets in raw_overrides.items():
        where = f"{prefix}.overrides.{env}"
        if not isinstance(env, str) or not env:
            raise ConfigError(f"{prefix}.overrides: environment names must be non-empty strings")
        if budgets is not None and not isinstance(budgets, Mapping):
            raise ConfigError(f"{where} must map a job name to a budget")
        overrides[env] = {}
        for job, budget in (budgets or {}).items():
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
        or len(database.encode()) > MAX_IDENTIFIER_BYTES
    ):
        raise ConfigError(f"{prefix}.database must be a database name (1-63 bytes)")
    return BudgetConfig(jobs, overrides, database)


def parse_job_name(value: object, *, where: str) -> str:
    if (
        not isinstance(value, str)
        or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*", value, re.ASCII)
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
    return " ".join(value.split())


def _jobs(jobs: object, prefix: str) -> Iterable[DeclaredJob]:
    if jobs is None:
        return
    if isinstance(jobs, Mapping):
        items = list(jobs.items())
    elif isinstance(jobs, list | tuple):
        if not all(isinstance(entry, Mapping) and "name" in entry for entry in jobs):
            raise ConfigError(f"{prefix}: every list entry needs a name")
        items = [(e["name"], {k: v for k, v in e.items() if k != "name"}) for e in jobs]
    else:
        raise ConfigError(f"{prefix} must map a job name to {{schedule, function, budget}}")
    seen: set[str] = set()
    for raw_name, spec in items:
        name = parse_job_name(raw_name, where=prefix)
        where = f"{prefix}.{name}"
        if name in seen:
            raise ConfigError(f"{where} is declared twice")
        seen.add(name)
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be a mapping with schedule, function and budget")
        reject_unknown(spec, JOB_KEYS, prefix=f"{where}.")
        for key in ("schedule", "function", "budget"):
            if spec.get(key) is None:
                raise ConfigError(f"{where}.{key} is required")
        schedule = parse_schedule(spec["schedule"], where=f"{where}.schedule")
        function = parse_function_name(spec["function"], where=f"{where}.function")
        budget_ms = parse_budget_ms(spec["budget"], where=f"{where}.budget")
        yield DeclaredJob(name, schedule, function, budget_ms, default_budget_ms=budget_ms)


def load_budget_config(path: str | Path) -> BudgetConfig:
    """The ``cron_budgets`` section of a YAML file (top level or under ``leaseguard:``)."""
    section = load_config_file(path)
    if CONFIG_SECTION not in section:
        raise ConfigError(f"config file {path} has no {CONFIG_SECTION} section")
    return budget_config_from_mapping(section[CONFIG_SECTION])


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
