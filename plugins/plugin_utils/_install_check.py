# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: is the collection that runs the one the Python package ships?

ansible runs the first copy of the collection on its path, the plugins import the Python's
one `leaseguard` package: when they differ, say so, naming both.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from importlib import metadata

import yaml

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED_PATH = "ansible_collections/leaseguard/deploy"


def collection_identity(root):
    """(version, sha256 of FILES.json) of a collection; no hash in a source checkout."""
    try:
        with open(os.path.join(root, "MANIFEST.json"), "rb") as fh:
            version = json.load(fh)["collection_info"]["version"]
        with open(os.path.join(root, "FILES.json"), "rb") as fh:
            return version, hashlib.sha256(fh.read()).hexdigest()
    except FileNotFoundError:
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            return str(yaml.safe_load(fh)["version"]), None
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None, None


def install_hint():
    """The command that installs what the plugins need."""
    requirements = os.path.join(COLLECTION_ROOT, "requirements.txt")
    if os.path.isfile(requirements):
        return f"pip install -r {requirements}"
    version = collection_identity(COLLECTION_ROOT)[0]
    package = "'leaseguard[ansible]" + (f"=={version}'" if version else "'")
    return f"pip install {package}"


@lru_cache(maxsize=1)
def install_warnings():
    """Mismatches between the running collection and the leaseguard package; () if none.

    Found once, in ansible-playbook's own process: every forked worker inherits the answer
    instead of searching the installed packages again (~90 ms per task and host).
    """
    try:
        dist = metadata.distribution("leaseguard")
    except metadata.PackageNotFoundError:
        return ()
    version, files_hash = collection_identity(COLLECTION_ROOT)
    if version != dist.version:
        return (
            f"leaseguard.deploy {version} runs from {COLLECTION_ROOT}, but the leaseguard "
            f"Python package is {dist.version}: the plugins and the core they call come from "
            f"different releases. Install matching versions ({install_hint()}).",
        )
    shipped = os.path.realpath(str(dist.locate_file(SHIPPED_PATH)))
    if files_hash is None or shipped == os.path.realpath(COLLECTION_ROOT):
        return ()
    shipped_hash = collection_identity(shipped)[1]
    if shipped_hash is None or shipped_hash == files_hash:
        return ()
    return (
        f"two different copies of leaseguard.deploy {version}: ansible runs {COLLECTION_ROOT} "
        f"(first on the collections path), the leaseguard package ships {shipped}. "
        "Remove one (ansible-galaxy collection verify --offline shows which was changed).",
    )


install_warnings()
