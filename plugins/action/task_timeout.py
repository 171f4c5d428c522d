# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.task_timeout (documented in plugins/modules/).

The lookups are commands run on the host through the task's connection; their output is
parsed here by the leaseguard core, the same parsers the CLI and Fabric use.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import (
    task_timeout_argument_spec,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import (
    AnsibleRunner,
    LeaseguardError,
    clock_from_here,
    contract_from,
    failure,
    lookup_result,
    require_leaseguard,
    resolve_runtime_facts,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True  # read-only

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        require_leaseguard()
        args = self.validate_argument_spec(task_timeout_argument_spec())[1]
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        runner = AnsibleRunner(self, host)
        try:
            contract = contract_from(args)
            facts = resolve_runtime_facts(contract, runner)
            clock = clock_from_here(runner, facts)
        except LeaseguardError as exc:
            result.update(failure(exc, host, what="lookup"))
            return result
        result.update(lookup_result(facts, clock))
        return result
