# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the one run() every leaseguard action plugin shares.

Arguments are validated against the module's spec; a LeaseguardError becomes a failed task
naming the host and what failed (never a traceback, never a pass).
"""

from __future__ import annotations

from types import MappingProxyType

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import module_spec
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import (
    LeaseguardError,
    api,
    require_leaseguard,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import failure
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._known_vars import (
    checked_variables,
)


class LeaseguardAction(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    failure_what = "check"  # only a check's failure carries `decision: failed`
    needs_leaseguard = True  # False: runs without the leaseguard package (check_vars)
    module = ""  # plugins/modules/<module>.py, whose DOCUMENTATION gives the spec
    role_variables = MappingProxyType(
        {}
    )  # option -> the role variable from_role_vars fills it from

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Parsed in ansible-playbook's own process, before it forks a worker per task and host.
        module_spec(cls.module)

    def act(self, args, host, task_vars):
        """The task's result for these validated `args`; a LeaseguardError fails it."""
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self.needs_leaseguard:
            require_leaseguard()
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        given = self._task.args
        if boolean(given.get("from_role_vars", False), strict=False):
            # Only the variables that are set are templated: one `default(omit)` argument per
            # option would cost every host a template per option (~0.2 s for the guard's).
            filled = {
                option: self._templar.template(task_vars[variable])
                for option, variable in self.role_variables.items()
                if option not in given and variable in task_vars
            }
            self._task.args = {**filled, **given}
        spec, options = module_spec(self.module)
        try:
            if self.needs_leaseguard:
                # Before the spec's float()/int(), which read any script's digits as numbers.
                api.refuse_non_ascii_numbers(self._task.args, spec)
            args = self.validate_argument_spec(spec, **options)[1]
            if args.get("check_vars"):  # check_vars' own check, first, in this same task
                checked = checked_variables(task_vars)
                if checked.get("failed"):  # before anything ran; a check's decision: failed
                    refused = {"decision": "failed"} if self.failure_what == "check" else {}
                    return {**result, **checked, **refused}
            result.update(self.act(args, host, task_vars))
        except LeaseguardError as exc:
            result.update(failure(exc, host, what=self.failure_what))
        return result
