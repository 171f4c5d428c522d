"""pg_cron statement budgets, pure: `config` (the declaration), `planning` (the decision)."""
