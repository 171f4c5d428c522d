"""The one public API of the Ansible collection: plugins/ import nothing else of the package
(tests/unit/test_layout.py), so its insides can change shape. Each name, a use case or a value
type, loads on first use (PEP 562): a lease_guard task does not pay for the budgets' imports."""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    # budgets (cron_budget)
    "task_budgets": "leaseguard.core.budgets.config",
    "converge_jobs": "leaseguard.adapters.budgets",
    "resume_pauses": "leaseguard.orchestration.intake",
    # intake holds (intake_hold)
    "intake_hold": "leaseguard.orchestration.intake",
    "verify_holds": "leaseguard.orchestration.intake",
    # host lookups and restarts (runtime_restart, task_timeout, check_vars, lease_guard)
    "restart_runtime": "leaseguard.adapters.runtime",
    "CommandResult": "leaseguard.core.lookups",
    "RestartSpec": "leaseguard.core.restart",
    "missing_target": "leaseguard.core.restart",
    # SSH paths to the database
    "DatabaseAddress": "leaseguard.adapters.ssh",
    "SshOptions": "leaseguard.adapters.ssh",
    "make_connection": "leaseguard.adapters.ssh",
    "direct_conninfo": "leaseguard.core.config_values",
    "each_hosts_own": "leaseguard.core.config_values",
    "invalid_dsn": "leaseguard.core.config_values",
    "reject_hostaddr": "leaseguard.core.config_values",
    "tunnel_far_end": "leaseguard.core.config_values",
    "split_tty": "leaseguard.adapters.runtime",
    "tty_argv": "leaseguard.adapters.runtime",
    "parse_openssh_args": "leaseguard.core.config_values",
    "task_session": "leaseguard.orchestration.ssh_session",
    "lookup_report": "leaseguard.orchestration.ssh_session",
    "tunnelled": "leaseguard.adapters.ssh",
    # judgment and drains (lease_guard)
    "refuse_non_ascii_numbers": "leaseguard.core.config_values",
    "CONFIG_KEYS": "leaseguard.core.contract",
    "load_contract": "leaseguard.core.contract",
    "ConfigError": "leaseguard.core.errors",
    "LeaseguardError": "leaseguard.core.errors",
    "IntakeLost": "leaseguard.core.errors",
    "TunnelError": "leaseguard.core.errors",
    "host_report": "leaseguard.core.fleet",
    "failure_result": "leaseguard.core.verdict",
    "intake_line": "leaseguard.orchestration.intake",
    "drain_options": "leaseguard.orchestration.drain_run",
    "drain_every_host": "leaseguard.orchestration.ssh_session",
    "decisions_summary": "leaseguard.orchestration.ssh_session",
    "drain_host": "leaseguard.orchestration.drain_run",
    "signals_set": "leaseguard.orchestration.drain_run",
    "IntakeAccess": "leaseguard.orchestration.session",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'leaseguard.api' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
