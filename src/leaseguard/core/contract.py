"""The contract: which table holds the work, and how the protected system defines a lease.

The keys are the same everywhere (a YAML file, Fabric config under ``leaseguard:``, Ansible
``leaseguard_*`` variables). Layers are merged in a fixed, written-down order by
`merge_layers`; `contract_from_mapping` then validates the result and names the offending
key in every message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leaseguard.core.config_values import (
    choice,
    identifier,
    number_value,
    optional_identifier,
    optional_number,
    optional_text,
    optional_zone,
    parse_command,
    reject_unknown,
    section,
    status_list,
    text_value,
    whole_number,
)
from leaseguard.core.errors import ConfigError
from leaseguard.core.presets import (
    NO_CLAIM_TIME_RULES,
    ROW_EXPIRY_RULE,
    RULE_COLUMNS,
    STATUS_COLUMN_RULES,
    VISIBILITY_RULE,
    KindTimeouts,
    claim_rule,
    kind_column,
    kind_timeouts,
    preset_layer,
)

# The section of a config file that declares pg_cron budgets (leaseguard.core.budgets reads it);
# the contract itself ignores it, so one file can serve `check`, `drain` and `budgets`.
CRON_BUDGETS_SECTION = "cron_budgets"
TASK_TIMEOUT_SOURCES = ("docker", "podman", "systemd", "process", "env_file", "command", "fixed")
RUNTIME_SOURCES = ("docker", "podman", "systemd", "process", "fixed", "none")
# What `table` names: a table (plain or partitioned) holds the live rows; a view reads them
# from its base tables and is taken only when the contract says so on purpose. Materialized
# views (a snapshot, stale by design) and anything else are never judged.
RELATION_KINDS = ("table", "view")
# Statuses that are neither claimed nor queued when the contract does not say otherwise.
DEFAULT_FINISHED_STATUSES = ("done", "failed")


@dataclass(frozen=True)
class LeaseRule:
    """How long a claim stays valid: multiplier x task timeout, or a per-row expiry column."""

    multiplier: float = 2.0
    expires_at_column: str | None = None


@dataclass(frozen=True)
class TaskTimeoutLookup:
    """Where the protected system's configured task timeout is read on each host."""

    source: str = "docker"
    container: str = "backend"
    variable: str = "APP_TASK_TIMEOUT_S"
    default_s: float | None = None
    value_s: float | None = None
    unit: str | None = None
    pid_file: str | None = None
    path: str | None = None
    command: tuple[str, ...] = ()
    engine: str = "docker"  # the container CLI that runs `command` (docker or podman)


@dataclass(frozen=True)
class RuntimeLookup:
    """Where the start time of the worker runtime (the orphan cut-off) is read."""

    source: str = "docker"
    container: str = "backend"
    unit: str | None = None
    pid_file: str | None = None
    started_at: str | None = None


@dataclass(frozen=True)
class Contract:
    """Everything the guard needs to know about the protected system's work table."""

    table: str = "execution_runs"
    schema: str | None = None
    relation_kind: str = "table"
    id_column: str = "id"
    status_column: str = "status"
    claimed_statuses: tuple[str, ...] = ("running",)
    queued_statuses: tuple[str, ...] = ("open",)
    # None: DEFAULT_FINISHED_STATUSES minus any the contract classes as claimed or queued.
    # Kept apart from an explicit list so that only statuses someone wrote are checked
    # against an enum's labels (an enum without a 'failed' label needs no config for it).
    finished_statuses: tuple[str, ...] | None = None
    claimed_at_column: str = "claimed_at"
    lease: LeaseRule = field(default_factory=LeaseRule)
    task_timeout: TaskTimeoutLookup = field(default_factory=TaskTimeoutLookup)
    runtime: RuntimeLookup = field(default_factory=RuntimeLookup)
    clock_skew_s: float = 0.0
    statement_timeout_ms: int = 5000
    lock_timeout_ms: int = 2000
    connect_timeout_s: int = 10
    # The zone a `timestamp without time zone` column was written in. None: not declared,
    # and a naive time column then fails the check (adapters.guard): the session's TimeZone
    # was chosen by nobody for this, and a wrong zone shifts every claim by hours.
    timestamp_zone: str | None = None
    # The job queue whose stock schema and liveness rule the keys above came from, if any.
    preset: str | None = None
    # River: the kinds whose workers set their own timeout, in seconds (None: no timeout).
    kind_timeouts: KindTimeouts = field(default_factory=KindTimeouts)

    @property
    def effective_lock_timeout_ms(self) -> int:
        """The lock wait, never longer than the statement budget it lives inside."""
        return min(self.lock_timeout_ms, self.statement_timeout_ms)

    @property
    def finished(self) -> tuple[str, ...]:
        """The finished statuses in force: the explicit list, else the defaults."""
        if self.finished_statuses is not None:
            return self.finished_statuses
        taken = {*self.claimed_statuses, *self.queued_statuses}
        return tuple(s for s in DEFAULT_FINISHED_STATUSES if s not in taken)

    @property
    def classified_statuses(self) -> tuple[str, ...]:
        """Every status the contract classes: claimed, queued, finished."""
        return (*self.claimed_statuses, *self.queued_statuses, *self.finished)

    @property
    def table_label(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    @property
    def claim_rule(self) -> str:
        """How a row is claimed: by status (the default) or a preset's own rule."""
        return claim_rule(self.preset)

    @property
    def rows_carry_expiry(self) -> bool:
        """Each row says when its claim expires: no task timeout, no multiplier needed.

        pg-boss computes it from its own NOT NULL columns, and pgmq's `vt` is NOT NULL in its
        own schema. Not so with `lease.expires_at_column`: a row whose expiry is NULL ("no
        lease known") is judged by the task-timeout lease, so the task timeout is looked up."""
        return self.claim_rule in (ROW_EXPIRY_RULE, VISIBILITY_RULE)

    @property
    def has_status_column(self) -> bool:
        """Rows are classed by a status column (graphile-worker's are not, by locked_at, nor
        Solid Queue's: every row of its claims table is a claim, nor Que's and good_job's,
        claimed by a lock, nor pgmq's, by read_ct); pg-boss's and procrastinate's are, with
        a per-row expiry beside."""
        return self.claim_rule in STATUS_COLUMN_RULES

    @property
    def has_claimed_at(self) -> bool:
        """Whether a claim records when it was made (Que's advisory lock and procrastinate's
        job do not)."""
        return self.claim_rule not in NO_CLAIM_TIME_RULES

    def columns(self) -> dict[str, str]:
        """The contract key of every column the guard reads, by column name."""
        named = {"id_column": self.id_column}
        if self.has_status_column:
            named["status_column"] = self.status_column
        if self.has_claimed_at:
            named["claimed_at_column"] = self.claimed_at_column
        named |= {f"preset {c}": c for c in RULE_COLUMNS.get(self.claim_rule, ())}
        if self.lease.expires_at_column:
            named["lease.expires_at_column"] = self.lease.expires_at_column
        if self.kind_timeouts:
            named["kind_timeouts"] = kind_column(self.preset)
        return named


# --- layering -----------------------------------------------------------------------------


def merge_layers(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge config layers; later layers win key by key.

    The order callers use is: a preset < the config file (or Fabric's config, itself
    layered by Fabric) < command-line flags (or the Ansible module's options). A key
    missing from a later layer keeps the earlier value; nested sections (lease,
    task_timeout, runtime) merge key by key too.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = merge_layers(merged[key], value)
            else:
                merged[key] = value
    return merged


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML contract file; a top-level ``leaseguard:`` section is unwrapped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path} ({type(exc).__name__})") from None
    # Imported here: a run given no config file (a check on a DSN) does not load PyYAML.
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML ({type(exc).__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of contract keys")
    section = data.get("leaseguard", data)
    if not isinstance(section, Mapping):
        raise ConfigError(f"config file {path}: 'leaseguard' must be a mapping")
    return dict(section)


def load_contract(*layers: Mapping[str, Any] | None) -> Contract:
    """Merge the layers in order and validate them into a Contract."""
    return contract_from_mapping(merge_layers(*layers))


# --- validation ---------------------------------------------------------------------------


def contract_from_mapping(data: Mapping[str, Any]) -> Contract:
    """Validate a plain mapping of contract keys; every error names its key.

    A `preset` is the lowest layer above the built-in defaults: every key set explicitly,
    in any layer, overrides the preset's value for it.
    """
    reject_unknown(data, _TOP_KEYS, prefix="")
    preset = optional_text(data, "preset")
    if preset is not None:
        data = merge_layers(preset_layer(preset, data), data)
    lease = section(data, "lease")
    task_timeout = section(data, "task_timeout")
    runtime = section(data, "runtime")
    default = Contract()
    claimed = status_list(data, "claimed_statuses", default.claimed_statuses, allow_empty=False)
    queued = status_list(data, "queued_statuses", default.queued_statuses, allow_empty=True)
    finished = None
    if data.get("finished_statuses") is not None:
        finished = status_list(data, "finished_statuses", (), allow_empty=True)
    _reject_overlap(claimed_statuses=claimed, queued_statuses=queued, finished_statuses=finished)
    return Contract(
        table=identifier(data, "table", default.table),
        schema=optional_identifier(data, "schema"),
        relation_kind=choice(
            data, "relation_kind", default.relation_kind, RELATION_KINDS, prefix=""
        ),
        id_column=identifier(data, "id_column", default.id_column),
        status_column=identifier(data, "status_column", default.status_column),
        claimed_statuses=claimed,
        queued_statuses=queued,
        finished_statuses=finished,
        claimed_at_column=identifier(data, "claimed_at_column", default.claimed_at_column),
        lease=_lease_rule(lease),
        task_timeout=_task_timeout_lookup(task_timeout),
        runtime=_runtime_lookup(runtime),
        clock_skew_s=number_value(data, "clock_skew_s", default.clock_skew_s, minimum=0.0),
        statement_timeout_ms=whole_number(
            data, "statement_timeout_ms", default.statement_timeout_ms
        ),
        lock_timeout_ms=whole_number(data, "lock_timeout_ms", default.lock_timeout_ms),
        connect_timeout_s=whole_number(data, "connect_timeout_s", default.connect_timeout_s),
        timestamp_zone=optional_zone(data, "timestamp_zone"),
        preset=preset,
        kind_timeouts=kind_timeouts(data.get("kind_timeouts"), preset),
    )


_TOP_KEYS = frozenset(
    {
        "table",
        "schema",
        "relation_kind",
        "id_column",
        "status_column",
        "claimed_statuses",
        "queued_statuses",
        "finished_statuses",
        "claimed_at_column",
        "lease",
        "task_timeout",
        "runtime",
        "clock_skew_s",
        "statement_timeout_ms",
        "lock_timeout_ms",
        "connect_timeout_s",
        "timestamp_zone",
        "preset",
        "kind_timeouts",
    }
)
_LEASE_KEYS = frozenset({"multiplier", "expires_at_column"})
_TASK_TIMEOUT_KEYS = frozenset(
    {"source", "container", "variable", "default_s", "value_s", "unit", "pid_file", "path"}
    | {"command", "engine"}
)
_RUNTIME_KEYS = frozenset({"source", "container", "unit", "pid_file", "started_at"})

CONFIG_KEYS = frozenset(
    _TOP_KEYS
    | {f"lease.{k}" for k in _LEASE_KEYS}
    | {f"task_timeout.{k}" for k in _TASK_TIMEOUT_KEYS}
    | {f"runtime.{k}" for k in _RUNTIME_KEYS}
) - {"lease", "task_timeout", "runtime"}


def _reject_overlap(**lists: tuple[str, ...] | None) -> None:
    """A status belongs to one class: claimed (someone holds it), queued, or finished."""
    seen: dict[str, str] = {}
    for key, statuses in lists.items():
        for status in statuses or ():
            if status in seen:
                raise ConfigError(
                    f"status {status!r} is in both {seen[status]} and {key}: a status is "
                    "claimed (someone holds it), queued (nobody does yet) or finished, "
                    "never two of these"
                )
            seen[status] = key


def _lease_rule(data: Mapping[str, Any]) -> LeaseRule:
    reject_unknown(data, _LEASE_KEYS, prefix="lease.")
    multiplier = number_value(
        data, "multiplier", LeaseRule.multiplier, prefix="lease.", minimum=1.0
    )
    return LeaseRule(
        multiplier=multiplier,
        expires_at_column=optional_identifier(data, "expires_at_column", prefix="lease."),
    )


def _task_timeout_lookup(data: Mapping[str, Any]) -> TaskTimeoutLookup:
    prefix = "task_timeout."
    reject_unknown(data, _TASK_TIMEOUT_KEYS, prefix=prefix)
    default = TaskTimeoutLookup()
    source = choice(data, "source", default.source, TASK_TIMEOUT_SOURCES, prefix=prefix)
    lookup = TaskTimeoutLookup(
        source=source,
        container=text_value(data, "container", default.container, prefix=prefix),
        variable=text_value(data, "variable", default.variable, prefix=prefix),
        default_s=optional_number(data, "default_s", prefix=prefix),
        value_s=optional_number(data, "value_s", prefix=prefix),
        unit=optional_text(data, "unit", prefix=prefix),
        pid_file=optional_text(data, "pid_file", prefix=prefix),
        path=optional_text(data, "path", prefix=prefix),
        command=parse_command(data, "command", prefix=prefix),
        engine=choice(data, "engine", default.engine, ("docker", "podman"), prefix=prefix),
    )
    _require_for_source(lookup.source, _TASK_TIMEOUT_NEEDS, lookup, prefix)
    return lookup


def _runtime_lookup(data: Mapping[str, Any]) -> RuntimeLookup:
    prefix = "runtime."
    reject_unknown(data, _RUNTIME_KEYS, prefix=prefix)
    default = RuntimeLookup()
    lookup = RuntimeLookup(
        source=choice(data, "source", default.source, RUNTIME_SOURCES, prefix=prefix),
        container=text_value(data, "container", default.container, prefix=prefix),
        unit=optional_text(data, "unit", prefix=prefix),
        pid_file=optional_text(data, "pid_file", prefix=prefix),
        started_at=optional_text(data, "started_at", prefix=prefix),
    )
    _require_for_source(lookup.source, _RUNTIME_NEEDS, lookup, prefix)
    return lookup


# Which extra key each source cannot work without.
_TASK_TIMEOUT_NEEDS = {"systemd": "unit", "process": "pid_file", "env_file": "path"}
_TASK_TIMEOUT_NEEDS |= {"command": "command", "fixed": "value_s"}
_RUNTIME_NEEDS = {"systemd": "unit", "process": "pid_file", "fixed": "started_at"}


def _require_for_source(source: str, needs: dict[str, str], lookup: object, prefix: str) -> None:
    key = needs.get(source)
    if key and not getattr(lookup, key):
        raise ConfigError(f"{prefix}{key} is required when {prefix}source is {source!r}")
