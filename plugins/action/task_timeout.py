# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.task_timeout: the lookups and a clock reading in one exec
through the task's connection."""

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import (
    AnsibleRunner,
    LeaseguardAction,
    api,
    contract_from,
)


class ActionModule(LeaseguardAction):
    module = "task_timeout"
    failure_what = "lookup"  # read-only, so check mode runs it as it is

    def act(self, args, host, task_vars):
        return api.lookup_report(contract_from(args), AnsibleRunner(self, host))
