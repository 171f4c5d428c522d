# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  pause_cron_jobs:
    description: pg_cron jobs (by name) that take new work, paused while intake is held; each must exist and be
      visible to the role.
    type: list
    elements: str
    default: []
  cron_database:
    description: The database holding pg_cron's C(cron.job). If not set, the one of O(db_name) or O(dsn).
    type: str
  cron_user:
    description: The role that owns the pg_cron jobs, when the guard's is another; pg_cron lets each role see and
      alter only its own jobs.
    type: str
  cron_password:
    description: The password of O(cron_user); never logged or returned. If not set, E(LEASEGUARD_CRON_PASSWORD),
      else libpq's E(PGPASSWORD) or C(.pgpass).
    type: str
  pause_command:
    description: An argv run on the host to stop its intake; needs O(resume_command).
    type: list
    elements: str
    default: []
  resume_command:
    description: The argv run on the host to restart its intake afterwards (on every exit path).
    type: list
    elements: str
    default: []
  resume_retry_s:
    description: Retry a failed resume with backoff for this many seconds, each attempt over a fresh tunnel, then
      fail naming what stays paused.
    type: float
    default: 60.0
"""
