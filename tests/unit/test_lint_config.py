"""The repository's .ansible-lint is developer tooling: it names only paths of this tree, and
the collection artifact does not ship it (where its paths would not exist)."""

import fnmatch
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_every_excluded_path_exists_in_the_tree():
    config = yaml.safe_load((REPO / ".ansible-lint").read_text())
    missing = [p for p in config.get("exclude_paths", []) if not (REPO / p).exists()]
    assert missing == []


def test_the_galaxy_artifact_does_not_ship_the_lint_config():
    ignored = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    assert any(fnmatch.fnmatch(".ansible-lint", pattern) for pattern in ignored)
