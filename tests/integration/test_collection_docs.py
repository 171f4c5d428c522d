"""Every module of leaseguard.deploy renders in ansible-doc with its three documentation parts."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sandbox.ansible_env import ansible_env
from tests.support.ansible_run import REPO
from tests.support.collection_tools import collection_tools

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


# --- the collection as the Ansible docs tooling checks it -------------------------------------


def _tools_env(tmp_path: Path, tools: Path) -> dict[str, str]:
    env = ansible_env(tmp_path)
    return {**env, "PATH": f"{tools}{os.pathsep}{env['PATH']}"}


@pytest.mark.integration
@pytest.mark.slow
def test_antsibull_docs_lints_the_collection_docs_and_plugin_docs(tmp_path: Path):
    """Every module, role entry point and fragment as the Ansible docs site builds them."""
    tools = collection_tools()
    link = REPO / "build" / "collections" / "ansible_collections" / "leaseguard" / "deploy"
    done = subprocess.run(
        [tools / "antsibull-docs", "lint-collection-docs", "--plugin-docs", "."],
        cwd=link,
        env=_tools_env(tmp_path, tools),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
def test_antsibull_changelog_lints_the_fragments_and_the_changelog(tmp_path: Path):
    tools = collection_tools()
    changelog = tools / "antsibull-changelog"
    for argv in (
        [changelog, "lint"],
        [changelog, "lint-changelog-yaml", "changelogs/changelog.yaml"],
    ):
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_readme_and_every_entry_point_a_description(role: str):
    """What Galaxy's importer and antsibull-docs refuse a role for, checked without them."""
    assert (REPO / "roles" / role / "README.md").is_file()
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    for name, entry in specs["argument_specs"].items():
        assert entry.get("short_description") and entry.get("description"), (role, name)
