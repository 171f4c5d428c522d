# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: is the collection that runs the one the Python package ships?

The collection reaches a controller two ways: inside the `leaseguard` wheel (pip) and as a
Galaxy tarball. ansible loads the first copy on its collections path (ANSIBLE_COLLECTIONS_PATH
/ collections_path first, the Python's site-packages last), while the plugins always import
the one `leaseguard` package of that Python. When the two come from different releases or
differ in content, the plugins of one run over the core of another: say so, naming both.
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
# libyaml's safe loader when PyYAML has it (galaxy.yml in a source checkout).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def collection_identity(root):
    """(version, sha256 of FILES.json) of a collection directory; the hash is None in-tree.

    An installed collection (Galaxy, or the wheel's copy) has MANIFEST.json and FILES.json; a
    source checkout has only galaxy.yml.
    """
    try:
        with open(os.path.join(root, "MANIFEST.json"), "rb") as fh:
            version = json.load(fh)["collection_info"]["version"]
        with open(os.path.join(root, "FILES.json"), "rb") as fh:
            return version, hashlib.sha256(fh.read()).hexdigest()
    except FileNotFoundError:
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            return str(yaml.load(fh, Loader=_LOADER)["version"]), None  # noqa: S506
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None, None


def running_version():
    return collection_identity(COLLECTION_ROOT)[0]


def install_hint():
    """The command that installs what the plugins need: requirements.txt (Galaxy, wheel)."""
    requirements = os.path.join(COLLECTION_ROOT, "requirements.txt")
    if os.path.isfile(requirements):
        return f"pip install -r {requirements}"
    version = running_version()
    package = "'leaseguard[ansible]" + (f"=={version}'" if version else "'")
    return f"pip install {package}"


@lru_cache(maxsize=1)
def install_warnings():
    """Mismatches between the running collection and the leaseguard package; () if none.

    Found once per process (the files do not change during a run): ansible-playbook imports
    the plugins in its own process and every task's forked worker inherits the answer,
    instead of searching the installed packages and reading the collection's files again
    (~90 ms per task and host here).
    """
    return tuple(_mismatches())


def _mismatches():
    try:
        dist = metadata.distribution("leaseguard")
    except metadata.PackageNotFoundError:
        return []
    version, files_hash = collection_identity(COLLECTION_ROOT)
    if version != dist.version:
        return [
            f"leaseguard.deploy {version} runs from {COLLECTION_ROOT}, but the leaseguard "
            f"Python package is {dist.version}: the plugins and the core they call come from "
            f"different releases. Install matching versions ({install_hint()})."
        ]
    shipped = os.path.realpath(str(dist.locate_file(SHIPPED_PATH)))
    if files_hash is None or shipped == os.path.realpath(COLLECTION_ROOT):
        return []
    shipped_hash = collection_identity(shipped)[1]
    if shipped_hash is None or shipped_hash == files_hash:
        return []
    return [
        f"two different copies of leaseguard.deploy {version}: ansible runs {COLLECTION_ROOT} "
        f"(first on the collections path), the leaseguard package ships {shipped}. "
        "Remove one (ansible-galaxy collection verify --offline shows which was changed)."
    ]


install_warnings()  # in ansible-playbook's own process, before any worker is forked
