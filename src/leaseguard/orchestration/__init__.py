"""Orchestration: one guard session, a drain and its intakes, composed from core and adapters.

What every front (CLI, Fabric, Ansible plugins) runs the same way (docs/architecture.md).
"""
