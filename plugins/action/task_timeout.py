"""Action plugin for leaseguard.deploy.task_timeout: the host's lookups and its clock reading."""

from ansible_collections.leaseguard.deploy.plugins.plugin_utils import _action
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import api


class ActionModule(_action.LeaseguardAction):
    failure_what = "lookup"  # read-only, so check mode runs it as it is

    def act(self, args, host, task_vars):
        return api.lookup_report(_action.contract_from(args), _action.AnsibleRunner(self, host))
