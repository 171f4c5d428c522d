"""The `leaseguard:` section of a Fabric config, validated, and the SSH connection it asks for.

What a host's SSH connection and lookups need (HostSettings) is read without the database
driver: `fab guard` starts its hosts on it, and only then reads the rest (the DSN, the
`drain:` section), whose validation imports psycopg, while the hosts do their part.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from fabric import Config, Connection
from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.adapters.ssh import DatabaseAddress, SshOptions, make_connection
from leaseguard.core.config_values import (
    flag,
    optional_port,
    optional_text,
    reject_unknown,
    whole_number,
)
from leaseguard.core.contract import CONFIG_KEYS, CRON_BUDGETS_SECTION, Contract, load_contract
from leaseguard.core.errors import EXIT_USAGE, ConfigError

if TYPE_CHECKING:
    from leaseguard.orchestration.drain_options import DrainOptions

T = TypeVar("T")

# The keys of the `connection:` section (docs/configuration.md lists each one).
CONNECTION_KEYS = frozenset(
    {"dsn", "db_host", "db_port", "known_hosts", "accept_unknown_host_keys", "gateway"}
)
# The keys of the `drain:` section (DrainOptions' fields; named here so that loading the
# collection does not import the drain's database code).
DRAIN_KEYS = frozenset(
    {"poll_s", "deadline_s", "pause_cron_jobs", "cron_database", "pause_command"}
    | {"resume_command", "status_file", "metrics_file", "resume_retry_s"}
    | {"cron_user", "cron_password"}
)
DEFAULT_CONNECT_TIMEOUT_S = Contract.connect_timeout_s


def env_defaults() -> dict[str, Any]:
    """Every `leaseguard:` key, unset (None), as the collection's config.

    invoke reads `FABRIC_<KEY_PATH>` environment variables only for keys its config already
    holds, so these make `FABRIC_LEASEGUARD_TABLE=runs` or
    `FABRIC_LEASEGUARD_CONNECTION_DSN=...` work as they do for Fabric's own keys. A value
    still None when read means "not set" (`_plain` drops it).
    """
    tree: dict[str, Any] = {}
    keys = (
        set(CONFIG_KEYS)
        | {f"connection.{k}" for k in CONNECTION_KEYS}
        | {f"drain.{k}" for k in DRAIN_KEYS}
    )
    for key in keys:
        *parents, leaf = key.split(".")
        node = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = None
    return {"leaseguard": tree}


@dataclass(frozen=True)
class HostSettings:
    """What a host's SSH connection and its lookups need: the contract and the SSH options."""

    contract: Contract
    ssh: SshOptions


@dataclass(frozen=True)
class FabricSettings:
    """The `leaseguard:` section of Fabric config, validated."""

    contract: Contract
    conninfo: str
    address: DatabaseAddress
    ssh: SshOptions
    drain: DrainOptions


def host_settings_from_config(config: Any) -> HostSettings:
    """The contract (the keys at the top of `leaseguard:`) and `connection:`'s SSH options."""
    section, connection, _ = _sections(config)
    contract = load_contract(section)
    contract = replace(contract, connect_timeout_s=_connect_timeout_s(config, section))
    ssh = SshOptions(
        known_hosts=optional_text(connection, "known_hosts", prefix="connection."),
        accept_unknown_host_keys=flag(
            _env_flag(connection, "accept_unknown_host_keys"),
            "accept_unknown_host_keys",
            False,
            prefix="connection.",
        ),
        gateway=optional_text(connection, "gateway", prefix="connection."),
        # One connect budget for the whole path: the SSH hop and the database behind it.
        connect_timeout_s=contract.connect_timeout_s,
    )
    return HostSettings(contract, ssh)


def _connect_timeout_s(config: Any, section: dict[str, Any]) -> int:
    """The connect budget of the whole path (SSH, each jump host, the database behind).

    `fab -t N` first (a flag of this run), then `leaseguard.connect_timeout_s`, then
    Fabric's own `timeouts.connect`, then 10 s.
    """
    connect_kwargs = config.get("connect_kwargs") or {}
    timeouts = config.get("timeouts") or {}
    given = [
        ("fab -t", connect_kwargs.get("timeout")),
        ("connect_timeout_s", section.get("connect_timeout_s")),
        ("timeouts.connect", timeouts.get("connect")),
    ]
    for key, value in given:
        if value is not None:
            return whole_number({key: value}, key, DEFAULT_CONNECT_TIMEOUT_S)
    return DEFAULT_CONNECT_TIMEOUT_S


def _env_flag(data: dict[str, Any], key: str) -> dict[str, Any]:
    """`data` with a "true"/"false" string (a FABRIC_LEASEGUARD_* variable) as a boolean.

    invoke turns a variable into a boolean only for a key whose default is one, and then
    reads "false" as true; any other string is still refused, naming the key.
    """
    value = data.get(key)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return {**data, key: value.lower() == "true"}
    return data


def settings_from_config(config: Any, host: HostSettings | None = None) -> FabricSettings:
    """Contract keys at the top of `leaseguard:`; `connection:` and `drain:` beside them.

    `host`: this config's HostSettings when already read (a guard reads them first).
    """
    # Imported here, not above: the DSN is read by libpq's own parser (psycopg) and the
    # drain's options live beside the drain's database code; HostSettings' readers (a
    # guard starting its hosts) must not wait for those imports.
    from leaseguard.core.dsn import tunnel_far_end
    from leaseguard.orchestration.drain_options import drain_options

    host = host or host_settings_from_config(config)
    _, connection, drain = _sections(config)
    given = connection.get("dsn") != ""  # an empty dsn means "from LEASEGUARD_DSN", as unset
    dsn = optional_text(connection, "dsn", prefix="connection.") if given else None
    dsn = dsn or os.environ.get("LEASEGUARD_DSN", "")
    address = DatabaseAddress(
        *tunnel_far_end(
            dsn,
            optional_text(connection, "db_host", prefix="connection."),
            optional_port(connection, "db_port", prefix="connection."),
        )
    )
    return FabricSettings(host.contract, dsn, address, host.ssh, drain_options(drain))


def _sections(config: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """`leaseguard:` without its `connection:` and `drain:` sections, and those two."""
    section = _plain(config.get("leaseguard", {}) or {})
    connection = section.pop("connection", None) or {}
    if not isinstance(connection, dict):
        raise ConfigError("connection must be a mapping")
    reject_unknown(connection, CONNECTION_KEYS, prefix="connection.")
    drain = section.pop("drain", {}) or {}
    section.pop(CRON_BUDGETS_SECTION, None)  # pg_cron budgets: read by `leaseguard budgets`
    return section, connection, drain


def _plain(value: Any) -> Any:
    """invoke's DataProxy -> plain dicts/lists, so validation sees ordinary types.

    Unset keys (None: `env_defaults`, or `key: null` in YAML) are left out, as if absent.
    """
    if hasattr(value, "keys"):
        items = {str(k): _plain(value[k]) for k in value.keys()}  # noqa: SIM118
        return {k: v for k, v in items.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# Each host's Connection gets its own copy of the task's config. Fabric does not copy a
# fabric Config it is given, and its Connection() writes to it (inline_ssh_env, ...): every
# write re-merges the whole config, which is empty for that moment. With the hosts
# connecting in parallel, another host's lookup then read an empty config and failed
# ("running a lookup over SSH failed (AttributeError)"), or a host connected without the
# key it read from it ("No authentication methods available"). Cloning only reads the
# task's config, under a lock as invoke's Config is not thread-safe; nothing writes it.
_CONFIG_CLONING = threading.Lock()


def connection_to(host: str, c: Context, settings: HostSettings | FabricSettings) -> Connection:
    config = None
    if isinstance(c.config, Config):
        with _CONFIG_CLONING:
            config = c.config.clone()
    return make_connection(host, settings.ssh, config)


def settings_or_exit(c: Context, host: HostSettings | None = None) -> FabricSettings:
    return _or_usage_exit(lambda: settings_from_config(c.config, host))


def host_settings_or_exit(c: Context) -> HostSettings:
    return _or_usage_exit(lambda: host_settings_from_config(c.config))


def _or_usage_exit(read: Callable[[], T]) -> T:
    """What `read` returns; a config it refuses ends the task as a usage error (exit 2)."""
    try:
        return read()
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None
