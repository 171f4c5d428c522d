# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # The intake's own database identity, shared by every module that holds intake.
    DOCUMENTATION = r"""
options:
  cron_user:
    description:
      - The role that owns the intake pg_cron jobs, when the guard's role is another one (a
        read-only guard role). Holding, recording, resuming and finding leftover holds run
        as it, since pg_cron shows and lets each role alter only its own jobs.
    type: str
  cron_password:
    description:
      - The password of O(cron_user); never logged or returned.
      - If not set, the E(LEASEGUARD_CRON_PASSWORD) environment variable, else libpq's
        E(PGPASSWORD) or C(.pgpass).
    type: str
"""
