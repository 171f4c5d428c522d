"""The `leaseguard` command line, a front over the orchestration layer (docs/architecture.md).

`main` is the console script's entry point (`leaseguard = "leaseguard.cli:main"`).
"""

from leaseguard.cli.main import main

__all__ = ["main"]
