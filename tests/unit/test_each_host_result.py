"""An each_host task's own result answers for every host of the batch (fail_on_defer, force),
not only for the host that runs it; the playbook tests cover the defer/force path end to end."""

import importlib
import sys

import pytest

from tests.support.ansible_run import REPO

sys.path.insert(0, str(REPO / "build" / "collections"))  # the link `make collection-link` makes
lease_guard = importlib.import_module(
    "ansible_collections.leaseguard.deploy.plugins.action.lease_guard"
)

ARGS = {"held_intakes": None, "fail_on_defer": True, "force": False}


def judged(**decisions):
    results = {}
    for host, decision in decisions.items():
        result = {"changed": False, "decision": decision, "msg": f"{decision} on {host}"}
        results[host] = {**result, "failed": True} if decision == "failed" else result
    return results


@pytest.mark.parametrize(
    ("others", "named"),
    [
        ({"app2": "defer"}, "; deferring: app2"),
        ({"app2": "failed"}, "; failed: app2"),  # a host whose own check failed is not safe
        ({"app2": "defer", "app3": "failed"}, "; deferring: app2; failed: app3"),
    ],
)
def test_fail_on_defer_fails_on_another_host_not_safe_to_restart(others, named):
    task = lease_guard._each_result(judged(app1="proceed", **others), ARGS, "app1")
    assert task["failed"] is True and task["msg"].endswith(named), task
    assert task["decision"] == "proceed"  # the running host's own verdict stays its own


def test_every_host_proceeding_passes_and_without_fail_on_defer_nothing_fails():
    assert not lease_guard._each_result(judged(app1="proceed", app2="proceed"), ARGS, "app1").get(
        "failed"
    )
    lenient = {**ARGS, "fail_on_defer": False}
    assert not lease_guard._each_result(judged(app1="proceed", app2="defer"), lenient, "app1").get(
        "failed"
    )


def test_a_task_host_outside_the_batch_fails_when_the_worst_host_failed():
    task = lease_guard._each_result(
        judged(app2="proceed", app3="failed"), {**ARGS, "fail_on_defer": False}, "ctl"
    )
    assert (task["decision"], task["failed"]) == ("failed", True)
    task = lease_guard._each_result(judged(app2="proceed"), ARGS, "ctl")
    assert (task["decision"], task["failed"]) == ("proceed", False)
