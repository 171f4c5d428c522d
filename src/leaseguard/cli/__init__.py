"""The `leaseguard` command line; `main` is the console script's entry point."""

from leaseguard.cli.main import main

__all__ = ["main"]
