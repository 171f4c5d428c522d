"""The tools Ansible users check a collection with, in a venv of their own under build/.

galaxy-importer (Galaxy's own import checks), antsibull-docs and antsibull-changelog pin
versions of attrs, pydantic, sphinx ... that the project's venv need not share, so they live in
build/collection-tools, made once from PyPI (pip's cache makes a re-creation quick) and made
again only when the pins below change.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / "build" / "collection-tools"


def pins() -> list[str]:
    # The running ansible-core, so that the importer's ansible-doc reads what the tests run.
    ansible_core = f"ansible-core=={importlib.metadata.version('ansible-core')}"
    return [
        "galaxy-importer==0.4.44",
        "antsibull-docs==2.28.0",
        "antsibull-changelog==0.36.0",
        ansible_core,
    ]


def collection_tools() -> Path:
    """The bin directory of the tools' venv, created (or re-created) when needed."""
    stamp = VENV / "pins.txt"
    wanted = "\n".join(pins()) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted:
        return VENV / "bin"
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", VENV], check=True, timeout=300)
    pip = [VENV / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *pins()], check=True, timeout=900)
    stamp.write_text(wanted)
    return VENV / "bin"
