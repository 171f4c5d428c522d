"""leaseguard: judge in-flight work by the protected system's own claim lease."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typed for checkers; imported on first use at run time
    from leaseguard.core.contract import Contract, load_contract
    from leaseguard.core.errors import LeaseguardError
    from leaseguard.core.verdict import Decision, Verdict

__version__ = "0.1.0"
__all__ = ["Contract", "Decision", "LeaseguardError", "Verdict", "load_contract"]
# Each name's module, imported on first use (PEP 562): `leaseguard --help` needs none.
_MODULES = {"Contract": "contract", "load_contract": "contract", "LeaseguardError": "errors"}
_MODULES |= {"Decision": "verdict", "Verdict": "verdict"}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'leaseguard' has no attribute {name!r}")
    return getattr(importlib.import_module(f"leaseguard.core.{_MODULES[name]}"), name)
