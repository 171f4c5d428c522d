"""Ship the collection inside the wheel, exactly as the Galaxy tarball has it (see pyproject.toml).

The wheel's copy is the tarball that scripts/build_collection.py builds (`ansible-galaxy
collection build` of a staged copy carrying the leaseguard core), extracted: the same files
(galaxy.yml's build_ignore applies) plus the MANIFEST.json and FILES.json that
`ansible-galaxy collection verify --offline` checks. A pip-installed and a Galaxy-installed
copy of one release are therefore byte-identical, and the plugins can tell when two copies on
the collections path differ (plugins/plugin_utils/_action.py).
"""

import importlib.util
import shutil
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COLLECTION_DIR = "ansible_collections/leaseguard/deploy"


def collection_builder(root: Path) -> ModuleType:
    """scripts/build_collection.py of the tree being built (not an importable package)."""
    spec = importlib.util.spec_from_file_location(
        "build_collection", root / "scripts" / "build_collection.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CollectionBuildHook(BuildHookInterface[BuilderConfig]):
    _staging: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return  # in-tree use goes through ansible.cfg and the build/ link
        self._staging = Path(tempfile.mkdtemp(prefix="leaseguard-collection-"))
        root = Path(self.root)
        tarball = collection_builder(root).build(root, self._staging / "dist")
        extracted = self._staging / "collection"
        with tarfile.open(tarball) as archive:
            archive.extractall(extracted, filter="data")
        build_data["force_include"][str(extracted)] = COLLECTION_DIR

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
