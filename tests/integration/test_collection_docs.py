"""Every module of leaseguard.deploy renders in ansible-doc with its three documentation parts."""

import json
import subprocess
from pathlib import Path

import pytest

from sandbox.ansible_env import ansible_env
from tests.support.ansible_run import REPO

MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))


def test_the_collection_has_its_modules():
    assert {"task_timeout", "lease_guard"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_documentation_examples_and_return(module: str, tmp_path: Path):
    name = f"leaseguard.deploy.{module}"
    done = subprocess.run(
        ["ansible-doc", "--json", name],
        cwd=REPO,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)[name]
    assert entry["doc"]["short_description"]
    assert entry["doc"]["options"], "every module takes options"
    assert entry["examples"].strip()
    assert entry["return"], "RETURN documents the result"
    # ansible-doc joins the requirements with ", ": a full stop would render as "controller., "
    assert [r for r in entry["doc"].get("requirements", []) if r.rstrip().endswith(".")] == []
    text = subprocess.run(
        ["ansible-doc", name],
        cwd=REPO,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "EXAMPLES" in text and "RETURN VALUES" in text
