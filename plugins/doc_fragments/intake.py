# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # The intake's own database identity, shared by every module that holds intake.
    DOCUMENTATION = r"""
options:
  cron_user:
    description:
      - The role that owns the intake pg_cron jobs, when the guard's is another (read-only)
        one. Holds, resumes and leftover checks run as it, since pg_cron lets each role see
        and alter only its own jobs.
    type: str
  cron_password:
    description:
      - The password of O(cron_user); never logged or returned. If not set,
        E(LEASEGUARD_CRON_PASSWORD), else libpq's E(PGPASSWORD) or C(.pgpass).
    type: str
"""
