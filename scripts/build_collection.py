"""Build the Galaxy tarball of leaseguard.deploy, carrying the leaseguard core it runs.

    python scripts/build_collection.py [--output-path DIR]     (`make collection`: dist/)

The collection's action plugins call the leaseguard core (the package in src/leaseguard). A
Galaxy user installs the tarball and `pip install -r requirements.txt`, which names only
public packages (psycopg, PyYAML, Fabric), so the tarball carries the core itself, as
community collections carry their shared code: the layers the plugins import (core,
adapters, orchestration; never the CLI or Fabric fronts) are copied to
plugins/plugin_utils/_vendor/leaseguard/. plugins/plugin_utils/_action.py imports the installed
leaseguard package when the controller has one and this copy otherwise.

The copy is made in a staging tree, never in the work tree: the files git knows about
(tracked, plus untracked-but-not-ignored), so nothing a tool left behind (.ansible/, caches,
venvs) can reach the artifact; galaxy.yml's build_ignore then drops the non-collection paths.
Outside a git checkout (an sdist) every file is staged but the usual caches and venvs.

Standard library only: hatch_build.py loads this file to ship the same tarball in the wheel.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CORE_SOURCE = Path("src/leaseguard")
CORE_DEST = Path("plugins/plugin_utils/_vendor/leaseguard")
# The layers below the fronts (the import-linter layers contract keeps them free of the CLI
# and Fabric fronts): what the plugins import.
CORE_PARTS = ("__init__.py", "api.py", "core", "adapters", "orchestration")
# Outside git: directories that are never collection content (build_ignore drops the rest).
NOT_SOURCE = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".ansible", ".tox"}
NOT_SOURCE |= {".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "ansible_collections"}


def source_files(root: Path) -> list[Path]:
    """The source files under root, relative to it."""
    if (root / ".git").exists():
        argv = ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others"]
        listed = subprocess.run(
            [*argv, "--exclude-standard"], capture_output=True, text=True, check=True
        ).stdout
        return [Path(name) for name in listed.split("\0") if name and (root / name).is_file()]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if name not in NOT_SOURCE]
        found += [Path(dirpath, name).relative_to(root) for name in filenames]
    return found


def carried_core(path: Path) -> Path | None:
    """Where a file of the core goes in the collection, or None if it is not carried."""
    if CORE_SOURCE not in path.parents or path.suffix != ".py":
        return None
    inside = path.relative_to(CORE_SOURCE)
    return CORE_DEST / inside if inside.parts[0] in CORE_PARTS else None


def stage(root: Path, dest: Path) -> None:
    """Copy the collection's sources to dest, with the core it carries."""
    for path in source_files(root):
        targets = [path, carried_core(path)]
        for target in filter(None, targets):
            (dest / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / path, dest / target)


def build(root: Path, output_dir: Path) -> Path:
    """`ansible-galaxy collection build` of root's staged copy into output_dir; the tarball."""
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="leaseguard-collection-") as tmp:
        staged, home = Path(tmp, "deploy"), Path(tmp, "ansible-home")
        stage(root, staged)
        home.mkdir()
        (home / "ansible.cfg").write_text("")
        # The repository's ansible.cfg is for development; the build must not depend on it.
        env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
        env.update(
            ANSIBLE_CONFIG=str(home / "ansible.cfg"), ANSIBLE_HOME=str(home), ANSIBLE_NOCOLOR="1"
        )
        argv = [sys.executable, "-m", "ansible.cli.galaxy", "collection", "build", str(staged)]
        argv += ["--output-path", str(output_dir), "--force"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"ansible-galaxy collection build failed ({done.returncode}): {done.stderr.strip()}"
        )
    # "Created collection for leaseguard.deploy at /.../leaseguard-deploy-0.1.0.tar.gz"
    return Path(done.stdout.strip().splitlines()[-1].rpartition(" at ")[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    parser.add_argument("--output-path", type=Path, default=root / "dist")
    args = parser.parse_args()
    print(build(root, args.output_path.resolve()))


if __name__ == "__main__":
    main()
