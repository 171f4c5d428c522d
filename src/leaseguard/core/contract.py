"""The contract: which table holds the work, and how the protected system defines a lease.

The keys are the same everywhere (a YAML file, Fabric config under ``leaseguard:``, Ansible
``leaseguard_*`` variables). `merge_layers` merges the layers in order; `contract_from_mapping`
validates the result, naming the offending key in every message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

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
# the contract ignores it, so one file can serve `check`, `drain` and `budgets`.
CRON_BUDGETS_SECTION = "cron_budgets"
TASK_TIMEOUT_SOURCES = ("docker", "podman", "systemd", "process", "env_file", "command", "fixed")
RUNTIME_SOURCES = ("docker", "podman", "systemd", "process", "fixed", "none")
# A table (plain or partitioned) holds the live rows; a view is taken only when the contract
# says so on purpose. Materialized views (a snapshot, stale by design) are never judged.
RELATION_KINDS = ("table", "view")
# Statuses that are neither claimed nor queued when the contract does not say otherwise.
DEFAULT_FINISHED_STATUSES = ("done", "failed")


Reader = Callable[..., Any]  # (data, key, default, prefix=) -> the value, validated


def _read(read: Reader) -> dict[str, Reader]:
    """A field's metadata: the reader that validates its config key."""
    return {"read": read}


def _choice(choices: tuple[str, ...]) -> dict[str, Reader]:
    return _read(partial(choice, choices=choices))


def _read_section(data: Mapping[str, Any], key: str, default: Any, *, prefix: str) -> Any:
    """A nested section (lease, task_timeout, runtime) as its dataclass, `type(default)`."""
    cls, values, prefix = type(default), section(data, key), f"{key}."
    reject_unknown(values, _keys(cls), prefix=prefix)
    lookup = cls(**_read_fields(cls, values, prefix))
    source = getattr(lookup, "source", "")
    need = getattr(cls, "NEEDS", {}).get(source)
    if need and not getattr(lookup, need):
        raise ConfigError(f"{prefix}{need} is required when {prefix}source is {source!r}")
    return lookup


_TEXT, _OPTIONAL_TEXT = _read(text_value), _read(optional_text)
_IDENTIFIER, _OPTIONAL_IDENTIFIER = _read(identifier), _read(optional_identifier)
_SECTION, _WHOLE = _read(_read_section), _read(whole_number)


@dataclass(frozen=True)
class LeaseRule:
    """How long a claim stays valid: multiplier x task timeout, or a per-row expiry column."""

    multiplier: float = field(default=2.0, metadata=_read(partial(number_value, minimum=1.0)))
    expires_at_column: str | None = field(default=None, metadata=_OPTIONAL_IDENTIFIER)


@dataclass(frozen=True)
class TaskTimeoutLookup:
    """Where the protected system's configured task timeout is read on each host."""

    # The key each source cannot work without.
    NEEDS: ClassVar = dict(
        systemd="unit", process="pid_file", env_file="path", command="command", fixed="value_s"
    )

    source: str = field(default="docker", metadata=_choice(TASK_TIMEOUT_SOURCES))
    container: str = field(default="backend", metadata=_TEXT)
    variable: str = field(default="APP_TASK_TIMEOUT_S", metadata=_TEXT)
    default_s: float | None = field(default=None, metadata=_read(optional_number))
    value_s: float | None = field(default=None, metadata=_read(optional_number))
    unit: str | None = field(default=None, metadata=_OPTIONAL_TEXT)
    pid_file: str | None = field(default=None, metadata=_OPTIONAL_TEXT)
    path: str | None = field(default=None, metadata=_OPTIONAL_TEXT)
    command: tuple[str, ...] = field(default=(), metadata=_read(parse_command))
    # The container CLI that runs `command`.
    engine: str = field(default="docker", metadata=_choice(("docker", "podman")))


@dataclass(frozen=True)
class RuntimeLookup:
    """Where the start time of the worker runtime (the orphan cut-off) is read."""

    NEEDS: ClassVar = dict(systemd="unit", process="pid_file", fixed="started_at")

    source: str = field(default="docker", metadata=_choice(RUNTIME_SOURCES))
    container: str = field(default="backend", metadata=_TEXT)
    unit: str | None = field(default=None, metadata=_OPTIONAL_TEXT)
    pid_file: str | None = field(default=None, metadata=_OPTIONAL_TEXT)
    started_at: str | None = field(default=None, metadata=_OPTIONAL_TEXT)


@dataclass(frozen=True)
class Contract:
    """Everything the guard needs to know about the protected system's work table; the
    fields with a reader are validated in this order, after the status lists."""

    table: str = field(default="execution_runs", metadata=_IDENTIFIER)
    schema: str | None = field(default=None, metadata=_OPTIONAL_IDENTIFIER)
    relation_kind: str = field(default="table", metadata=_choice(RELATION_KINDS))
    id_column: str = field(default="id", metadata=_IDENTIFIER)
    status_column: str = field(default="status", metadata=_IDENTIFIER)
    claimed_statuses: tuple[str, ...] = ("running",)
    queued_statuses: tuple[str, ...] = ("open",)
    # None: DEFAULT_FINISHED_STATUSES minus any classed as claimed or queued. Kept apart from
    # an explicit list so that only statuses someone wrote are checked against an enum's labels.
    finished_statuses: tuple[str, ...] | None = None
    claimed_at_column: str = field(default="claimed_at", metadata=_IDENTIFIER)
    lease: LeaseRule = field(default_factory=LeaseRule, metadata=_SECTION)
    task_timeout: TaskTimeoutLookup = field(default_factory=TaskTimeoutLookup, metadata=_SECTION)
    runtime: RuntimeLookup = field(default_factory=RuntimeLookup, metadata=_SECTION)
    clock_skew_s: float = field(default=0.0, metadata=_read(number_value))
    statement_timeout_ms: int = field(default=5000, metadata=_WHOLE)
    lock_timeout_ms: int = field(default=2000, metadata=_WHOLE)
    connect_timeout_s: int = field(default=10, metadata=_WHOLE)
    # The zone a `timestamp without time zone` column was written in. None: a naive time
    # column fails the check, since a wrong zone shifts every claim by hours.
    timestamp_zone: str | None = field(default=None, metadata=_read(optional_zone))
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
        """Each row says when its claim expires, so no task timeout is looked up (pg-boss,
        pgmq: NOT NULL in their schemas; not `lease.expires_at_column`, which may be NULL)."""
        return self.claim_rule in (ROW_EXPIRY_RULE, VISIBILITY_RULE)

    @property
    def has_status_column(self) -> bool:
        return self.claim_rule in STATUS_COLUMN_RULES

    @property
    def has_claimed_at(self) -> bool:
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


def merge_layers(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge config layers; later layers win key by key, nested sections too.

    The order callers use: a preset < the config file (or Fabric's config) < command-line
    flags (or the Ansible module's options).
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
    import yaml  # a check given no config file does not load PyYAML

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML ({type(exc).__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of contract keys")
    found = data.get("leaseguard", data)
    if not isinstance(found, Mapping):
        raise ConfigError(f"config file {path}: 'leaseguard' must be a mapping")
    return dict(found)


def load_contract(*layers: Mapping[str, Any] | None) -> Contract:
    """Merge the layers in order and validate them into a Contract."""
    return contract_from_mapping(merge_layers(*layers))


# --- validation: one reader per key, each section's keys its dataclass's fields --------------


def _keys(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _read_fields(cls: type, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Every field of `cls` that has a reader, read from `data` in field order."""
    default = cls()
    return {
        f.name: f.metadata["read"](data, f.name, getattr(default, f.name), prefix=prefix)
        for f in fields(cls)
        if "read" in f.metadata
    }


CONFIG_KEYS = frozenset(
    {k for k in _keys(Contract) if k not in ("lease", "task_timeout", "runtime")}
    | {f"lease.{k}" for k in _keys(LeaseRule)}
    | {f"task_timeout.{k}" for k in _keys(TaskTimeoutLookup)}
    | {f"runtime.{k}" for k in _keys(RuntimeLookup)}
)


def contract_from_mapping(data: Mapping[str, Any]) -> Contract:
    """Validate a plain mapping of contract keys; every error names its key.

    A `preset` is the lowest layer above the built-in defaults: every key set explicitly,
    in any layer, overrides the preset's value for it.
    """
    reject_unknown(data, _keys(Contract), prefix="")
    preset = optional_text(data, "preset")
    if preset is not None:
        data = merge_layers(preset_layer(preset, data), data)
    for key in ("lease", "task_timeout", "runtime"):
        section(data, key)
    statuses: dict[str, Any] = {
        "claimed_statuses": status_list(
            data, "claimed_statuses", Contract.claimed_statuses, allow_empty=False
        ),
        "queued_statuses": status_list(
            data, "queued_statuses", Contract.queued_statuses, allow_empty=True
        ),
        "finished_statuses": None
        if data.get("finished_statuses") is None
        else status_list(data, "finished_statuses", (), allow_empty=True),
    }
    seen: dict[str, str] = {}  # a status is claimed (someone holds it), queued, or finished
    for key, listed in statuses.items():
        for status in listed or ():
            if status in seen:
                raise ConfigError(
                    f"status {status!r} is in both {seen[status]} and {key}: a status is "
                    "claimed (someone holds it), queued (nobody does yet) or finished, "
                    "never two of these"
                )
            seen[status] = key
    values = _read_fields(Contract, data, "")
    kinds = kind_timeouts(data.get("kind_timeouts"), preset)
    return Contract(**statuses, **values, preset=preset, kind_timeouts=kinds)
