# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: where the plugins' `leaseguard` core comes from.

The controller's installed `leaseguard` package when it has one; else the copy the Galaxy
tarball carries in _vendor/ (scripts/build_collection.py; never in the work tree), whose
requirements are the collection's requirements.txt. Import this before any `leaseguard` module.
"""

from __future__ import annotations

import importlib.util
import os
import sys

VENDOR_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vendor")
# Appended, not inserted: the carried copy stands in for a missing package, shadowing nothing.
CARRIED = importlib.util.find_spec("leaseguard") is None and os.path.isdir(
    os.path.join(VENDOR_DIR, "leaseguard")
)
if CARRIED:
    sys.path.append(VENDOR_DIR)
