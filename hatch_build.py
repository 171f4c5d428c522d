"""Ship the collection inside the wheel, exactly as the Galaxy tarball has it (see pyproject.toml).

The wheel's copy is the output of ansible-core's own `ansible-galaxy collection build`,
extracted: the same files (galaxy.yml's build_ignore applies) plus the MANIFEST.json and
FILES.json that `ansible-galaxy collection verify --offline` checks. A pip-installed and a
Galaxy-installed copy of one release are therefore byte-identical, and the plugins can tell
when two copies on the collections path differ (plugins/plugin_utils/_install_check.py).
"""

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COLLECTION_DIR = "ansible_collections/leaseguard/deploy"


def build_collection_tarball(root: Path, output_dir: Path) -> Path:
    """`ansible-galaxy collection build` of root into output_dir; the tarball's path."""
    home = output_dir / "ansible-home"
    home.mkdir()
    empty_cfg = home / "ansible.cfg"
    empty_cfg.write_text("")
    # The repository's ansible.cfg is for development; the build must not depend on it.
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(empty_cfg), ANSIBLE_HOME=str(home), ANSIBLE_NOCOLOR="1")
    argv = [sys.executable, "-m", "ansible.cli.galaxy", "collection", "build"]
    argv += [str(root), "--output-path", str(output_dir), "--force"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"ansible-galaxy collection build failed ({done.returncode}): {done.stderr.strip()}"
        )
    (tarball,) = output_dir.glob("leaseguard-deploy-*.tar.gz")
    return tarball


class CollectionBuildHook(BuildHookInterface[BuilderConfig]):
    _staging: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return  # in-tree use goes through ansible.cfg and the build/ link
        self._staging = Path(tempfile.mkdtemp(prefix="leaseguard-collection-"))
        tarball = build_collection_tarball(Path(self.root), self._staging)
        extracted = self._staging / "collection"
        with tarfile.open(tarball) as archive:
            archive.extractall(extracted, filter="data")
        build_data["force_include"][str(extracted)] = COLLECTION_DIR

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
