"""Every module's EXAMPLES, as a user copies them from ansible-doc, passes ansible-lint's
production profile (no reserved names such as `lookup`, FQCNs, named tasks, ...)."""

import subprocess
from pathlib import Path

import pytest
import yaml

from sandbox.ansible_env import ansible_env
from tests.integration.test_collection_docs import MODULES
from tests.support.ansible_run import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def examples_of(module: str) -> str:
    """EXAMPLES from the module's sidecar plugins/modules/<module>.yml, which ansible-doc shows."""
    sidecar = REPO / "plugins" / "modules" / f"{module}.yml"
    text = str(yaml.safe_load(sidecar.read_text(encoding="utf-8"))["EXAMPLES"])
    assert isinstance(yaml.safe_load(text), list), f"{module}: EXAMPLES is not a list of tasks"
    return text


def as_playbook(module: str, examples: str) -> str:
    """The examples pasted, as they are, under a play's `tasks:`."""
    tasks = "".join(f"    {line}".rstrip() + "\n" for line in examples.strip().splitlines())
    return (
        f"---\n- name: Examples of {module}\n  hosts: app\n  gather_facts: false\n  tasks:\n{tasks}"
    )


def test_the_examples_are_lint_clean_under_the_production_profile(tmp_path: Path):
    env = ansible_env(tmp_path)
    project = tmp_path / "project"  # a user's project: their own playbooks, no repo config
    project.mkdir()
    for module in MODULES:
        (project / f"{module}.yml").write_text(as_playbook(module, examples_of(module)))
    done = subprocess.run(
        ["ansible-lint", "--nocolor", "--offline", "--profile", "production"]
        + [f"{module}.yml" for module in MODULES],
        cwd=project,
        env={**env, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "build" / "collections")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
