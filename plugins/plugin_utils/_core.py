# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: where the plugins' `leaseguard` core comes from.

The controller's installed `leaseguard` package when it has one (pip, or the work tree's
editable install); else the copy the Galaxy tarball carries in _vendor/ (built by
scripts/build_collection.py, never in the work tree), whose Python requirements are the
collection's requirements.txt. Import this before any `leaseguard` module.
"""

from __future__ import annotations

import importlib.util
import os
import sys

VENDOR_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vendor")


def use_carried_core():
    """Make the carried copy importable when no leaseguard package is; True if it is used."""
    if importlib.util.find_spec("leaseguard") is not None:
        return False
    if not os.path.isdir(os.path.join(VENDOR_DIR, "leaseguard")):
        return False
    # Appended, not inserted: it stands in for a missing package and shadows nothing.
    sys.path.append(VENDOR_DIR)
    return True


CARRIED = use_carried_core()
