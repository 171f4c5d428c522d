"""Private to leaseguard.deploy: the `leaseguard` package the plugins run over (the installed one,
else the copy a Galaxy tarball carries in _vendor/), and a warning when the two differ."""

import hashlib
import importlib.util
import json
import os
import sys
from contextlib import suppress
from importlib import metadata
from pathlib import Path

import yaml
from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

HERE = Path(os.path.abspath(__file__)).parent
COLLECTION_ROOT = HERE.parents[1]
# Appended, not inserted: the carried copy stands in for a missing package, shadowing nothing.
CARRIED = importlib.util.find_spec("leaseguard") is None and (HERE / "_vendor/leaseguard").is_dir()
if CARRIED:
    sys.path.append(str(HERE / "_vendor"))

try:
    import leaseguard.api as api  # pylint: disable=consider-using-from-import
    from leaseguard.api import LeaseguardError

    # Loaded now, so a missing requirement (psycopg, Fabric) is named before any task runs.
    _LOADED = (api.task_session, api.drain_host, api.lookup_report)
except ImportError as exc:  # the controller's Python lacks the leaseguard package
    LEASEGUARD_IMPORT_ERROR = exc
    api = None

    class LeaseguardError(Exception):  # type: ignore[no-redef]
        """Stand-in so the plugins import; require_leaseguard() fails every task first."""
else:
    LEASEGUARD_IMPORT_ERROR = None

__all__ = ["LeaseguardError", "api", "require_leaseguard"]
display = Display()


def require_leaseguard():
    """Fail the task, saying what to install, without the package; warn on a mismatch."""
    exc = LEASEGUARD_IMPORT_ERROR
    if exc is not None:
        missing = "the leaseguard Python package is"
        if CARRIED:  # the Galaxy tarball carries the core: only its requirements can be missing
            missing = "the Python requirements of leaseguard.deploy are"
        raise AnsibleActionFail(
            f"{missing} required on the controller ({type(exc).__name__}: {exc}): install "
            f"them into the Python that runs ansible ({sys.executable}) with: {install_hint()}",
            orig_exc=exc,
        )
    if INSTALL_WARNING:
        display.warning(f"leaseguard: {INSTALL_WARNING}")


def collection_identity(root):
    """(version, sha256 of FILES.json) of a collection; no hash in a source checkout."""
    with suppress(FileNotFoundError):
        manifest = json.loads(Path(root, "MANIFEST.json").read_bytes())
        files = Path(root, "FILES.json").read_bytes()
        return manifest["collection_info"]["version"], hashlib.sha256(files).hexdigest()
    try:
        galaxy = Path(root, "galaxy.yml").read_text(encoding="utf-8")
        return str(yaml.safe_load(galaxy)["version"]), None
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None, None


def install_hint():
    if (requirements := COLLECTION_ROOT / "requirements.txt").is_file():
        return f"pip install -r {requirements}"
    version = collection_identity(COLLECTION_ROOT)[0]
    return f"pip install 'leaseguard[ansible]{f'=={version}' if version else ''}'"


def install_warning():
    """A mismatch between the running collection and the leaseguard package (None if none)."""
    try:
        dist = metadata.distribution("leaseguard")
    except metadata.PackageNotFoundError:
        return None
    version, files_hash = collection_identity(COLLECTION_ROOT)
    if version != dist.version:
        return (
            f"leaseguard.deploy {version} runs from {COLLECTION_ROOT}, but the leaseguard "
            f"Python package is {dist.version}: the plugins and the core they call come from "
            f"different releases. Install matching versions ({install_hint()})."
        )
    shipped = os.path.realpath(str(dist.locate_file("ansible_collections/leaseguard/deploy")))
    same = files_hash is None or shipped == os.path.realpath(COLLECTION_ROOT)
    if same or collection_identity(shipped)[1] in (None, files_hash):
        return None
    return (
        f"two different copies of leaseguard.deploy {version}: ansible runs {COLLECTION_ROOT} "
        f"(first on the collections path), the leaseguard package ships {shipped}. "
        "Remove one (ansible-galaxy collection verify --offline shows which was changed)."
    )


# Found once in ansible-playbook's process, inherited by every forked worker (~90 ms a task).
INSTALL_WARNING = install_warning()
