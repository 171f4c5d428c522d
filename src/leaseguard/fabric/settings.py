"""The `leaseguard:` section of a Fabric config, read once per task, and its SSH connection."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fabric import Config, Connection
from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.adapters.ssh import DatabaseAddress
from leaseguard.adapters.ssh_connect import SshOptions, make_connection
from leaseguard.core import config_values as values
from leaseguard.core.contract import CONFIG_KEYS, CRON_BUDGETS_SECTION, Contract, load_contract
from leaseguard.core.errors import EXIT_USAGE, ConfigError

if TYPE_CHECKING:
    from leaseguard.orchestration.drain_options import DrainOptions

CONNECTION_KEYS = frozenset(
    {"dsn", "db_host", "db_port", "known_hosts", "accept_unknown_host_keys", "gateway"}
)
# DrainOptions' fields, named here so that loading the collection imports no psycopg.
DRAIN_KEYS = frozenset(
    {"poll_s", "deadline_s", "pause_cron_jobs", "cron_database", "pause_command"}
    | {"resume_command", "status_file", "metrics_file", "resume_retry_s"}
    | {"cron_user", "cron_password"}
)


def env_defaults() -> dict[str, Any]:
    """Every `leaseguard:` key, unset: invoke reads a `FABRIC_<KEY_PATH>` variable only for a
    key its config holds (`FABRIC_LEASEGUARD_CONNECTION_DSN=...`)."""
    tree = {"connection": dict.fromkeys(CONNECTION_KEYS), "drain": dict.fromkeys(DRAIN_KEYS)}
    for key in CONFIG_KEYS:
        *parents, leaf = key.split(".")
        node: dict[str, Any] = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = None
    return {"leaseguard": tree}


@dataclass(frozen=True)
class FabricSettings:
    contract: Contract
    conninfo: str
    address: DatabaseAddress
    ssh: SshOptions
    drain: DrainOptions


def settings_from_config(config: Any) -> FabricSettings:
    """Contract keys at the top of `leaseguard:`; `connection:` and `drain:` beside them."""
    # psycopg parses the DSN and lives beside the drain's options: imported when a task runs.
    from leaseguard.core.dsn import tunnel_far_end
    from leaseguard.orchestration.drain_options import drain_options

    section = _plain(config.get("leaseguard", {}) or {})
    connection = section.pop("connection", None) or {}
    if not isinstance(connection, dict):
        raise ConfigError("connection must be a mapping")
    values.reject_unknown(connection, CONNECTION_KEYS, prefix="connection.")
    drain = section.pop("drain", {}) or {}
    section.pop(CRON_BUDGETS_SECTION, None)  # read by `leaseguard budgets`
    contract = load_contract(section)
    contract = replace(contract, connect_timeout_s=_connect_timeout_s(config, section))
    # A FABRIC_LEASEGUARD_* variable is a string here: "true"/"false" read as booleans.
    accept = connection.get("accept_unknown_host_keys")
    if isinstance(accept, str) and accept.lower() in ("true", "false"):
        connection["accept_unknown_host_keys"] = accept.lower() == "true"

    def text(key: str) -> str | None:
        return values.optional_text(connection, key, prefix="connection.")

    ssh = SshOptions(
        known_hosts=text("known_hosts"),
        accept_unknown_host_keys=values.flag(
            connection, "accept_unknown_host_keys", False, prefix="connection."
        ),
        gateway=text("gateway"),
        # One connect budget for the whole path: the SSH hop and the database behind it.
        connect_timeout_s=contract.connect_timeout_s,
    )
    # An empty dsn means "from LEASEGUARD_DSN", as unset.
    dsn = (text("dsn") if connection.get("dsn") != "" else None) or os.environ.get(
        "LEASEGUARD_DSN", ""
    )
    host = text("db_host")
    port = values.optional_port(connection, "db_port", prefix="connection.")
    address = DatabaseAddress(*tunnel_far_end(dsn, host, port))
    return FabricSettings(contract, dsn, address, ssh, drain_options(drain))


def _connect_timeout_s(config: Any, section: dict[str, Any]) -> int:
    """`fab -t N`, then `leaseguard.connect_timeout_s`, then `timeouts.connect`, then 10 s."""
    given = [
        ("fab -t", (config.get("connect_kwargs") or {}).get("timeout")),
        ("connect_timeout_s", section.get("connect_timeout_s")),
        ("timeouts.connect", (config.get("timeouts") or {}).get("connect")),
    ]
    for key, value in given:
        if value is not None:
            return values.whole_number({key: value}, key, Contract.connect_timeout_s)
    return Contract.connect_timeout_s


def _plain(value: Any) -> Any:
    """invoke's DataProxy as plain dicts/lists; unset keys (None) left out, as if absent."""
    if hasattr(value, "keys"):
        items = {str(k): _plain(value[k]) for k in value.keys()}  # noqa: SIM118
        return {k: v for k, v in items.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# Fabric's Connection writes to the config it is given (re-merging it, empty meanwhile), so
# each host gets its own clone; invoke's Config is not thread-safe, hence the lock.
_CONFIG_CLONING = threading.Lock()


def connection_to(host: str, c: Context, settings: FabricSettings) -> Connection:
    config = None
    if isinstance(c.config, Config):
        with _CONFIG_CLONING:
            config = c.config.clone()
    return make_connection(host, settings.ssh, config)


def settings_or_exit(c: Context) -> FabricSettings:
    """The task's settings; a config they refuse ends the task as a usage error (exit 2)."""
    try:
        return settings_from_config(c.config)
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None
