"""Callback for the tests and the demo: every task result by play, task and host, as JSON.

ansible-core no longer ships a JSON stdout callback (it moved to ansible.posix, which is not
installed here), and tests want the normal human output on stdout anyway. Enabled through
ANSIBLE_CALLBACKS_ENABLED; the file is $LEASEGUARD_TEST_RESULTS.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: results_file
type: aggregate
short_description: write task results to a JSON file (leaseguard tests and demo)
description: Writes every task result to the file named by LEASEGUARD_TEST_RESULTS.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "results_file"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.plays: list[dict[str, Any]] = []

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self.plays.append({"play": play.get_name(), "tasks": []})

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name()}, "hosts": {}})

    def _record(self, result: Any, **status: bool) -> None:
        data = {**self._clean(result._result), **status}
        self.plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = data

    @staticmethod
    def _clean(data: Any) -> dict[str, Any]:
        return dict(json.loads(json.dumps(data, default=str)))

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        hosts = sorted(stats.processed)
        summary = {h: stats.summarize(h) for h in hosts}
        path = os.environ["LEASEGUARD_TEST_RESULTS"]
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"plays": self.plays, "stats": summary}, out)
