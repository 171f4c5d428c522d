"""Ship the repository's collection content inside the wheel (see pyproject.toml)."""

from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COLLECTION_DIR = "ansible_collections/leaseguard/deploy"
CONTENT = ("galaxy.yml", "meta", "plugins", "roles", "playbooks")


class CollectionBuildHook(BuildHookInterface[BuilderConfig]):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return  # in-tree use goes through ansible.cfg and the build/ link
        root = Path(self.root)
        for name in CONTENT:
            # git keeps no empty folders: a fresh clone may lack roles/ or playbooks/ for now
            if (root / name).exists():
                build_data["force_include"][str(root / name)] = f"{COLLECTION_DIR}/{name}"
