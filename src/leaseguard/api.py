"""The one public API of the Ansible collection (plugins/ import nothing else of the package);
each name loads on first use (PEP 562): a lease_guard task does not pay for the budgets'."""

import importlib
from typing import Any

# Each home module and the names the plugins take from it.
_NAMES = {
    "leaseguard.core.budgets.config": "task_budgets",
    "leaseguard.core.config_values": "direct_conninfo each_hosts_own invalid_dsn "
    "parse_openssh_args refuse_non_ascii_numbers reject_hostaddr tunnel_far_end",
    "leaseguard.core.contract": "CONFIG_KEYS load_contract",
    "leaseguard.core.errors": "ConfigError IntakeLost LeaseguardError TunnelError",
    "leaseguard.core.fleet": "host_report",
    "leaseguard.core.lookups": "CommandResult",
    "leaseguard.core.restart": "RestartSpec missing_target",
    "leaseguard.core.verdict": "failure_result",
    "leaseguard.adapters.budgets": "converge_jobs",
    "leaseguard.adapters.runtime": "restart_runtime split_tty tty_argv",
    "leaseguard.adapters.ssh": "DatabaseAddress SshOptions make_connection tunnelled",
    "leaseguard.orchestration.drain_run": "drain_host drain_options signals_set",
    "leaseguard.orchestration.intake": "intake_hold intake_line resume_pauses verify_holds",
    "leaseguard.orchestration.session": "IntakeAccess",
    "leaseguard.orchestration.ssh_session": "decisions_summary drain_every_host lookup_report "
    "task_session",
}
_HOME = {name: module for module, names in _NAMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'leaseguard.api' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
