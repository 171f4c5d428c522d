"""Action plugin for leaseguard.deploy.runtime_restart: restart, then await a new start time."""

from ansible_collections.leaseguard.deploy.plugins.plugin_utils import _action
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import api


class ActionModule(_action.LeaseguardAction):
    failure_what = "restart"

    def act(self, args, host, task_vars):
        contract = _action.contract_from(args)
        spec = api.RestartSpec(
            args["method"],
            args["container"] or "",
            args["unit"] or "",
            tuple(args["command"]),
            host,
            args["stop_timeout_s"],
            args["verify_timeout_s"],
            contract.runtime.source,
        )
        runner = _action.AnsibleRunner(self, host)
        return api.restart_runtime(
            runner, spec, contract, args["lookup"], check_mode=self._task.check_mode
        )
