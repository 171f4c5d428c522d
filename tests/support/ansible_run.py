"""Run real `ansible-playbook` from tests and read its results as JSON.

The environment (private ANSIBLE_HOME and ControlPath directory, the repository's ansible.cfg,
the results file) is :func:`sandbox.ansible_env.ansible_env`, shared with ``make demo``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sandbox.ansible_env import ansible_env

REPO = Path(__file__).resolve().parents[2]


@dataclass
class PlaybookRun:
    returncode: int
    stdout: str
    stderr: str
    results_path: Path

    @property
    def report(self) -> dict[str, Any]:
        """Every task result (see callback_plugins/results_file.py)."""
        return dict(json.loads(self.results_path.read_text()))

    def results(self, task_name: str) -> dict[str, dict[str, Any]]:
        """The result of the named task, by host (the last play that ran it).

        A role's tasks are named "<role> : <name>"; either form matches.
        """
        found: dict[str, dict[str, Any]] = {}
        for play in self.report["plays"]:
            for task in play["tasks"]:
                name = task["task"]["name"]
                if task_name in (name, name.rpartition(" : ")[2]):
                    found = {**found, **task["hosts"]}
        return found

    def result(self, task_name: str, host: str) -> dict[str, Any]:
        return self.results(task_name)[host]

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        return dict(self.report["stats"])


# Facts every host reports the same without looking anything up: an hour's task timeout,
# no runtime start (no claim is an orphan).
FIXED_FACTS = {
    "leaseguard_task_timeout": {"source": "fixed", "value_s": 3600},
    "leaseguard_runtime": {"source": "none"},
}


def db_vars(db: Any, user: str = "postgres") -> dict[str, Any]:
    """The guard role's variables reaching a test database (`db` fixture) directly."""
    return {
        "leaseguard_db_host": db.cluster.host,
        "leaseguard_db_port": db.cluster.port,
        "leaseguard_db_name": db.name,
        "leaseguard_db_user": user,
    }


def write_inventory(path: Path, hosts: dict[str, dict[str, Any]], **group_vars: Any) -> Path:
    path.write_text(yaml.safe_dump({"app": {"hosts": hosts, "vars": group_vars}}))
    return path


def write_each_host_play(path: Path, *guards: dict[str, Any]) -> Path:
    """A play on group app: every host's task_timeout lookup (from its leaseguard_* variables),
    then each of `guards` (a task's name and lease_guard's extra options) as one each_host
    task judging every host (run_once)."""
    lookup = {
        "task_timeout": "{{ leaseguard_task_timeout }}",
        "runtime": "{{ leaseguard_runtime }}",
    }
    fleet = (
        "{{ dict(ansible_play_batch | zip(ansible_play_batch | map('extract', hostvars)"
        " | map(attribute='leaseguard_lookup'))) }}"
    )
    each = {"from_role_vars": True, "each_host": True, "fleet_lookups": fleet}
    tasks: list[dict[str, Any]] = [
        {"leaseguard.deploy.task_timeout": lookup, "register": "leaseguard_lookup"}
    ]
    for guard in guards:
        options = {key: value for key, value in guard.items() if key != "name"}
        named = {"name": guard["name"]} if "name" in guard else {}
        tasks.append(
            {**named, "leaseguard.deploy.lease_guard": {**each, **options}, "run_once": True}
        )
    path.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "tasks": tasks}]))
    return path


def run_playbook(
    playbook: Path | str,
    inventory: Path,
    work_dir: Path,
    *args: str,
    extra_vars: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> PlaybookRun:
    argv = ["ansible-playbook", "-i", str(inventory), str(playbook), *args]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    done = subprocess.run(
        argv,
        cwd=REPO,
        env={**ansible_env(work_dir), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(done.returncode, done.stdout, done.stderr, work_dir / "results.json")
