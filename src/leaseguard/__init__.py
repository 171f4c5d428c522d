"""leaseguard: judge in-flight work by the protected system's own claim lease."""

from leaseguard.core.contract import Contract, load_contract
from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Decision, Verdict

__all__ = ["Contract", "Decision", "LeaseguardError", "Verdict", "load_contract"]
__version__ = "0.1.0"
