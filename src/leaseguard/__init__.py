"""leaseguard: judge in-flight work by the protected system's own claim lease."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leaseguard.core.contract import Contract, load_contract
    from leaseguard.core.errors import LeaseguardError
    from leaseguard.core.verdict import Decision, Verdict

__all__ = ["Contract", "Decision", "LeaseguardError", "Verdict", "load_contract"]
__version__ = "0.1.0"
# Each name's module, imported on first use (PEP 562): `leaseguard --help` needs none.
_MODULES = {
    "Contract": "leaseguard.core.contract",
    "load_contract": "leaseguard.core.contract",
    "LeaseguardError": "leaseguard.core.errors",
    "Decision": "leaseguard.core.verdict",
    "Verdict": "leaseguard.core.verdict",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'leaseguard' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)
