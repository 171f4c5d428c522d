"""Adapters: the core's reach into PostgreSQL, pg_cron, SSH, hosts; none decides for a front."""
