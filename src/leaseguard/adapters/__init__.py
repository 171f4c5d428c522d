"""Adapters: the core's reach into the world (PostgreSQL, pg_cron, SSH tunnel, host lookups).

Each module wraps one outside system; none decides what a front does (docs/architecture.md).
"""
