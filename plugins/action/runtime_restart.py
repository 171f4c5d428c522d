# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.runtime_restart (documented in plugins/modules/): the
restart through the task's connection, then the runtime's start time read until it moved."""

from __future__ import annotations

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import LeaseguardAction
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import (
    contract_from,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    AnsibleRunner,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._runtime_restart import (
    checked,
    restart_from,
    restart_runtime,
    would_restart,
)


class ActionModule(LeaseguardAction):
    module = "runtime_restart"
    failure_what = "restart"

    def act(self, args, host, task_vars):
        contract = contract_from(args)
        restart = restart_from(args, host, contract)
        checked(restart, args["lookup"])
        if self._task.check_mode:
            return would_restart(restart)
        return restart_runtime(AnsibleRunner(self, host), restart, contract, args["lookup"])
