# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the one run() every leaseguard action plugin shares.

The task's arguments are validated against the module's argument spec, and a LeaseguardError
becomes a failed task naming the host and what failed (never a traceback, never a pass).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import module_spec
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import (
    LeaseguardError,
    failure,
    require_leaseguard,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._known_vars import (
    checked_variables,
)


class LeaseguardAction(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    # How a failure reads: "leaseguard: check failed on app1 (...)"; only a check's failure
    # carries `decision: failed`.
    failure_what = "check"
    needs_leaseguard = True  # False: runs without the leaseguard package (check_vars)
    module = ""  # plugins/modules/<module>.py, whose DOCUMENTATION gives the spec
    # Option -> the role variable that fills it with from_role_vars (unless the task sets it).
    role_variables: Mapping[str, str] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Read in ansible-playbook's own process, which imports the action plugins before it
        # forks a worker per task and host: every worker inherits the parsed DOCUMENTATION.
        module_spec(cls.module)

    def act(self, args, host, task_vars):
        """The task's result for these validated `args`; a LeaseguardError fails it."""
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self.needs_leaseguard:
            require_leaseguard()
        task_vars = task_vars or {}
        self._fill_from_role_variables(task_vars)
        spec, options = module_spec(self.module)
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        if self.needs_leaseguard:
            # Before the spec's float()/int(), which read any script's digits as numbers.
            from leaseguard.api import refuse_non_ascii_numbers

            try:
                refuse_non_ascii_numbers(self._task.args, spec)
            except LeaseguardError as exc:
                result.update(failure(exc, host, what=self.failure_what))
                return result
        args = self.validate_argument_spec(spec, **options)[1]
        if args.get("check_vars"):  # check_vars' own check, first, in this same task
            checked = checked_variables(task_vars)
            if checked.get("failed"):  # before anything ran
                refused = self.failure_what == "check"
                result.update({**checked, "decision": "failed"} if refused else checked)
                return result
        try:
            result.update(self.act(args, host, task_vars))
        except LeaseguardError as exc:
            result.update(failure(exc, host, what=self.failure_what))
        return result

    def _fill_from_role_variables(self, task_vars):
        """With from_role_vars, the options the task left unset, from the role's variables.

        Rather than one `{{ leaseguard_x | default(omit) }}` argument per option in the role:
        a worker templates every argument anew per task and host (~0.2 s per host for the
        guard's ~40 options); only the variables that are set are templated here.
        """
        given = self._task.args
        if not boolean(given.get("from_role_vars", False), strict=False):
            return
        filled = {
            option: self._templar.template(task_vars[variable])
            for option, variable in self.role_variables.items()
            if option not in given and variable in task_vars
        }
        self._task.args = {**filled, **given}
