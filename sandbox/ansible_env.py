"""The environment for running ansible-* commands against the sandbox from a checkout.

Each run gets its own ANSIBLE_HOME and ssh ControlPath directory (mux processes linger 60 s
and would otherwise be shared between runs), the repository's ansible.cfg (which points
collections_path at the in-tree collection link) and the ``results_file`` callback, which
writes every task result to ``<work_dir>/results.json`` for the caller to read.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.subprocess_env import clean_env

REPO = Path(__file__).resolve().parents[1]
CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"


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
