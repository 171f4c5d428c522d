# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
name: check_status
type: aggregate
short_description: Exit statuses for a --check dry run that tell defer, drift and unreachable apart
version_added: 0.1.0
author:
  - leaseguard maintainers (@leaseguard)
description:
  - "With this callback enabled, a C(--check) run of C(leaseguard.deploy.deploy) that did not
    pass exits with the reason, the most serious first: C(2) a host failed for another reason,
    C(4) a host, its jump host or its database tunnel was unreachable, C(3) a pg_cron budget
    drifted, C(75) a live claim would defer the run (as C(leaseguard check)). Runs without
    C(--check) keep ansible-playbook's exit statuses."
  - List this callback last in C(callbacks_enabled); it exits after the recap is printed.
requirements:
  - Enabled in ansible.cfg (C(callbacks_enabled = leaseguard.deploy.check_status)) or
    C(ANSIBLE_CALLBACKS_ENABLED)
"""

import sys  # noqa: E402 (DOCUMENTATION first, as in every plugin)

from ansible import context  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402

EXIT_STATUSES = (("failed", 2), ("unreachable", 4), ("drift", 3), ("defer", 75))  # worst first
# The roles' tasks that fail a host because a live claim defers it.
DEFER_TASKS = frozenset(
    {"Defer the restart while work is in flight", "Defer the migration while work is in flight"}
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "leaseguard.deploy.check_status"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._reasons = set()

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._reasons.add(reason(result._task.get_name(), result._result))

    def v2_runner_on_unreachable(self, result):
        self._reasons.add("unreachable")

    def v2_playbook_on_stats(self, stats):
        if not context.CLIARGS.get("check"):
            return
        for name, status in EXIT_STATUSES:
            if name in self._reasons:
                self._display.display(f"leaseguard: --check exits {status}: {name}")
                sys.exit(status)


def reason(task_name, result):
    """Why a task failed its host: defer, drift, unreachable or failed."""
    if result.get("drift"):  # cron_budget: a live budget drifted
        return "drift"
    if (result.get("error") or {}).get("type") == "TunnelError":
        return "unreachable"
    if task_name.rpartition(" : ")[2] in DEFER_TASKS:
        return "defer"
    return "failed"
