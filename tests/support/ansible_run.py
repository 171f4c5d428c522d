"""Run real `ansible-playbook` from tests and read its results as JSON.

Each run gets its own ANSIBLE_HOME and ssh ControlPath directory (mux processes linger 60 s
and would otherwise be shared across tests) and the repository's ansible.cfg, which points
collections_path at the in-tree collection link.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.subprocess_env import clean_env

REPO = Path(__file__).resolve().parents[2]


CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"


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


def ansible_env(work_dir: Path, **extra: str) -> dict[str, str]:
    """The environment for ansible-* commands: repo config, private state, results file."""
    home = work_dir / "ansible-home"
    control = work_dir / "cp"
    home.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    bin_dir = str(REPO / ".venv" / "bin")
    return clean_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(home),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(control),
        ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
        ANSIBLE_CALLBACKS_ENABLED="results_file",
        LEASEGUARD_TEST_RESULTS=str(work_dir / "results.json"),
        ANSIBLE_NOCOLOR="1",
        **extra,
    )


def write_inventory(path: Path, hosts: dict[str, dict[str, Any]], **group_vars: Any) -> Path:
    path.write_text(yaml.safe_dump({"app": {"hosts": hosts, "vars": group_vars}}))
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
