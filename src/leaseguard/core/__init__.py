"""The core: pure judgment; no network, subprocess or connection (docs/architecture.md)."""
