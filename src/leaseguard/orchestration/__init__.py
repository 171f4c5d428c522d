"""Orchestration: what every front (CLI, Fabric, Ansible plugins) runs the same way."""
