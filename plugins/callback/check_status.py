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
# The tasks that fail a host on a judgment made for it by another host's one task (a batch,
# a fleet): the cause is that judgment's, counted where it was made.
JUDGED_ELSEWHERE = (
    "Fail a host the batch's judgment could not judge",
    "Fail the hosts the fleet's failed judgment left unjudged",
    "Fail the hosts whose own check failed",
)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "leaseguard.deploy.check_status"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._reasons, self._judged, self._unjudged = set(), {}, False

    def v2_runner_on_ok(self, result):
        # Each host's failed verdict of a judgment made for several (each_host's `hosts`).
        for host, verdict in (result._result.get("hosts") or {}).items():
            if isinstance(verdict, dict) and verdict.get("failed"):
                self._judged[host] = reason("", verdict)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self.v2_runner_on_ok(result)  # a failed judgment's `hosts` count as well
        if ignore_errors:
            return
        name = result._task.get_name().rpartition(" : ")[2]
        if name not in JUDGED_ELSEWHERE:
            self._reasons.add(reason(name, result._result))
        elif (why := self._judged.get(result._host.get_name())) is not None:
            self._reasons.add(why)
        else:  # the one judgment failed: its own task counted why (else: failed, below)
            self._unjudged = True

    def v2_runner_on_unreachable(self, result):
        self._reasons.add("unreachable")

    def v2_playbook_on_stats(self, stats):
        if not context.CLIARGS.get("check"):
            return
        if self._unjudged and not self._reasons:
            self._reasons.add("failed")
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
    if task_name in DEFER_TASKS:
        return "defer"
    return "failed"
