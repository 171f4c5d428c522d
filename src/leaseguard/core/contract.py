"""The contract: which table holds the work, and how the protected system defines a lease. The
same keys in every front (a YAML file, Fabric's `leaseguard:`, Ansible's `leaseguard_*`)."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from leaseguard.core import config_values as read
from leaseguard.core import presets
from leaseguard.core.errors import ConfigError

T = TypeVar("T")
CRON_BUDGETS_SECTION = "cron_budgets"  # pg_cron budgets (core.budgets): one file for every command
# A view is judged only when the contract says so; a materialized view (stale by design) never.
RELATION_KINDS = ("table", "view")


def _key(default: Any, reader: Callable[..., Any], **options: Any) -> Any:
    """A key read by `reader`; one whose default is None may be left out (it stays None)."""
    read_it = read.optional(reader, **options) if default is None else partial(reader, **options)
    return field(default=default, metadata={"read": read_it})


@dataclass(frozen=True)
class LeaseRule:
    """How long a claim stays valid: multiplier x task timeout, or a per-row expiry column."""

    multiplier: float = _key(2.0, read.number_value, minimum=1.0)
    expires_at_column: str | None = _key(None, read.identifier)


@dataclass(frozen=True)
class TaskTimeoutLookup:
    """Where the protected system's configured task timeout is read on each host."""

    NEEDS: ClassVar = dict(
        systemd="unit", process="pid_file", env_file="path", command="command", fixed="value_s"
    )
    source: str = _key("docker", read.choice, choices=("docker", "podman", *NEEDS))
    container: str = _key("backend", read.text_value)
    variable: str = _key("APP_TASK_TIMEOUT_S", read.text_value)
    default_s: float | None = _key(None, read.number_value, positive=True)
    value_s: float | None = _key(None, read.number_value, positive=True)
    unit: str | None = _key(None, read.text_value)
    pid_file: str | None = _key(None, read.text_value)
    path: str | None = _key(None, read.text_value)
    command: tuple[str, ...] = _key((), read.parse_command)
    engine: str = _key("docker", read.choice, choices=("docker", "podman"))  # the CLI of `command`


@dataclass(frozen=True)
class RuntimeLookup:
    """Where the start time of the worker runtime (the orphan cut-off) is read."""

    NEEDS: ClassVar = dict(systemd="unit", process="pid_file", fixed="started_at")
    source: str = _key("docker", read.choice, choices=("docker", "podman", *NEEDS, "none"))
    container: str = _key("backend", read.text_value)
    unit: str | None = _key(None, read.text_value)
    pid_file: str | None = _key(None, read.text_value)
    started_at: str | None = _key(None, read.text_value)


@dataclass(frozen=True)
class Contract:
    """The protected system's work table; fields are read in this order, after the statuses."""

    table: str = _key("execution_runs", read.identifier)
    schema: str | None = _key(None, read.identifier)
    relation_kind: str = _key("table", read.choice, choices=RELATION_KINDS)
    id_column: str = _key("id", read.identifier)
    status_column: str = _key("status", read.identifier)
    claimed_statuses: tuple[str, ...] = ("running",)
    queued_statuses: tuple[str, ...] = ("open",)
    # None: Contract.finished derives it; only a list someone wrote is checked against an enum.
    finished_statuses: tuple[str, ...] | None = None
    claimed_at_column: str = _key("claimed_at", read.identifier)
    lease: LeaseRule = field(default_factory=LeaseRule)
    task_timeout: TaskTimeoutLookup = field(default_factory=TaskTimeoutLookup)
    runtime: RuntimeLookup = field(default_factory=RuntimeLookup)
    clock_skew_s: float = _key(0.0, read.number_value)
    statement_timeout_ms: int = _key(5000, read.whole_number)
    lock_timeout_ms: int = _key(2000, read.whole_number)
    connect_timeout_s: int = _key(10, read.whole_number)
    # The zone naive timestamp columns were written in; None fails them (a wrong zone: hours off).
    timestamp_zone: str | None = _key(None, read.zone)
    preset: str | None = None  # the job queue whose stock schema and rule the keys came from
    # River: the kinds whose workers set their own timeout, in seconds (None: no timeout).
    kind_timeouts: dict[str, float | None] = field(default_factory=dict, hash=False)

    @property
    def effective_lock_timeout_ms(self) -> int:
        """The lock wait, never longer than the statement budget it lives inside."""
        return min(self.lock_timeout_ms, self.statement_timeout_ms)

    @property
    def finished(self) -> tuple[str, ...]:
        if self.finished_statuses is not None:
            return self.finished_statuses
        taken = {*self.claimed_statuses, *self.queued_statuses}
        return tuple(s for s in ("done", "failed") if s not in taken)

    @property
    def classified_statuses(self) -> tuple[str, ...]:
        return (*self.claimed_statuses, *self.queued_statuses, *self.finished)

    @property
    def table_label(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    @property
    def claim_rule(self) -> str:
        return self.preset if self.preset in presets.RULE_COLUMNS else presets.STATUS_RULE

    @property
    def rows_carry_expiry(self) -> bool:
        """Each row's expiry is NOT NULL (pg-boss, pgmq): no task timeout is looked up."""
        return self.claim_rule in (presets.ROW_EXPIRY_RULE, presets.VISIBILITY_RULE)

    @property
    def has_status_column(self) -> bool:
        return self.claim_rule in presets.STATUS_COLUMN_RULES

    @property
    def has_claimed_at(self) -> bool:
        return self.claim_rule not in presets.NO_CLAIM_TIME_RULES

    def columns(self) -> dict[str, str]:
        """The contract key of every column the guard reads, by column name."""
        named = {"id_column": self.id_column}
        if self.has_status_column:
            named["status_column"] = self.status_column
        if self.has_claimed_at:
            named["claimed_at_column"] = self.claimed_at_column
        named |= {f"preset {c}": c for c in presets.RULE_COLUMNS.get(self.claim_rule, ())}
        if self.lease.expires_at_column:
            named["lease.expires_at_column"] = self.lease.expires_at_column
        if self.kind_timeouts:
            named |= {f"kind_timeouts {c}": c for c in presets.KIND_COLUMNS[self.preset or ""]}
        return named


def _keys(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


_SECTIONS = {"lease": LeaseRule, "task_timeout": TaskTimeoutLookup, "runtime": RuntimeLookup}
CONFIG_KEYS = frozenset(
    {k for k in _keys(Contract) if k not in _SECTIONS}
    | {f"{name}.{k}" for name, cls in _SECTIONS.items() for k in _keys(cls)}
)


def load_contract(*layers: Mapping[str, Any] | None) -> Contract:
    return contract_from_mapping(merge_layers(*layers))


def merge_layers(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge config layers; later ones win key by key (a preset < a file < flags)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            below = merged.get(key) if isinstance(merged.get(key), Mapping) else None
            # Mappings always rebuilt: a preset's own dicts are never shared with a contract's data.
            merged[key] = merge_layers(below, value) if isinstance(value, Mapping) else value
    return merged


def contract_from_mapping(data: Mapping[str, Any]) -> Contract:
    """Validate a mapping of contract keys; every key set explicitly overrides the preset's."""
    read.reject_unknown(data, _keys(Contract), prefix="")
    if (preset := read.optional_text(data, "preset")) is not None:
        if (layer := presets.PRESETS.get(preset)) is None:
            raise ConfigError(f"preset must be one of {', '.join(sorted(presets.PRESETS))}")
        if "table" not in layer and not data.get("table"):  # pgmq: one table per queue
            raise ConfigError(
                f"preset {preset} needs table: the queue's own table, q_<queue> "
                "(one check per queue)"
            )
        data = merge_layers(layer, data)
    for key in _SECTIONS:
        read.section(data, key)
    # Each a list of statuses, once each, in one list only; finished's missing: Contract.finished.
    statuses: dict[str, tuple[str, ...] | None] = {"finished_statuses": None}
    seen: dict[str, str] = {}
    for key in ("claimed_statuses", "queued_statuses", "finished_statuses"):
        value = data.get(key, getattr(Contract, key))
        if value is None and key == "finished_statuses":
            continue
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{key} must be a list of non-empty strings")
        if not value and key == "claimed_statuses":
            raise ConfigError(f"{key} must name at least one status")
        statuses[key] = tuple(dict.fromkeys(value))
        for status in statuses[key] or ():
            if status in seen:
                raise ConfigError(
                    f"status {status!r} is in both {seen[status]} and {key}: a status is claimed "
                    "(someone holds it), queued (nobody does yet) or finished, never two of these"
                )
            seen[status] = key
    kinds = presets.kind_timeouts(data.get("kind_timeouts"), preset)
    return _read(Contract, data, "", **statuses, preset=preset, kind_timeouts=kinds)


def _read(cls: type[T], data: Mapping[str, Any], prefix: str, **given: Any) -> T:
    """`cls` from `data`, each key checked by its field's reader; a section by its own class."""
    default, found = cls(), dict(given)
    for f in fields(cls):  # type: ignore[arg-type]
        if reader := f.metadata.get("read"):
            found[f.name] = reader(data, f.name, getattr(default, f.name), prefix=prefix)
        elif f.name in _SECTIONS:
            values, section = read.section(data, f.name), _SECTIONS[f.name]
            read.reject_unknown(values, _keys(section), prefix=f"{f.name}.")
            found[f.name] = _read(section, values, f"{f.name}.")
    value, source = cls(**found), found.get("source", "")
    need = getattr(cls, "NEEDS", {}).get(source)  # the key a source cannot work without
    if need and not getattr(value, need):
        raise ConfigError(f"{prefix}{need} is required when {prefix}source is {source!r}")
    return value


def read_yaml(path: str | Path, *, what: str = "config file", kind: str = "valid YAML") -> Any:
    """A YAML (or JSON) file's data; an error names the file, never its content."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path} ({type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not UTF-8 text (UnicodeDecodeError)") from None
    import yaml  # only when a file is given: a check given none does not load PyYAML

    class UniqueKeys(yaml.SafeLoader):
        """YAML silently keeps a key's last value: a key given twice is refused, naming it."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[object] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        raise ConfigError(
                            f"{what} {path}: key {key.value!r} is given twice "
                            f"(line {key.start_mark.line + 1}); give it once"
                        )
                    seen.add(key.value)
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not {kind} ({type(exc).__name__})") from None


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML contract file's keys; a top-level `leaseguard:` section is unwrapped."""
    if (data := read_yaml(path)) is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of contract keys")
    found = data.get("leaseguard", data)
    if not isinstance(found, Mapping):
        raise ConfigError(f"config file {path}: 'leaseguard' must be a mapping")
    return dict(found)
