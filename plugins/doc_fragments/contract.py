# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # The claim contract of the protected system. Defaults live in the leaseguard core, so
    # the CLI, Fabric and Ansible can never disagree about them; they are stated here in text.
    DOCUMENTATION = r"""
options:
  table:
    description: Table holding the work rows (default V(execution_runs)).
    type: str
  schema:
    description: Schema of O(table) (default the connection's search_path).
    type: str
  id_column:
    description: Column identifying a row in reports (default V(id)).
    type: str
  status_column:
    description: Column holding the row's status, compared as text (default V(status)).
    type: str
  claimed_statuses:
    description: Statuses meaning a worker holds the row (default V([running])).
    type: list
    elements: str
  queued_statuses:
    description: Statuses meaning nobody holds the row yet; never protected (default V([open])).
    type: list
    elements: str
  finished_statuses:
    description:
      - Statuses of rows nobody will run again (default V([done, failed]), minus any named as claimed or queued).
      - A status present in the table that is in none of O(claimed_statuses), O(queued_statuses) and O(finished_statuses) fails the check, naming it.
      - The three lists must not overlap.
    type: list
    elements: str
  claimed_at_column:
    description: Column the worker sets when it takes (or renews) the claim (default V(claimed_at)).
    type: str
  lease:
    description: How long a claim stays valid.
    type: dict
    suboptions:
      multiplier:
        description: The lease is this many task timeouts (default V(2.0), at least V(1)).
        type: float
      expires_at_column:
        description: A per-row lease expiry column; replaces the multiplier rule.
        type: str
  clock_skew_s:
    description: Tolerance when comparing the runtime start with C(claimed_at) (default V(0)).
    type: float
  statement_timeout_ms:
    description: The guard query's own time budget (default V(5000)).
    type: int
  lock_timeout_ms:
    description: The guard query's lock wait, capped at O(statement_timeout_ms) (default V(2000)).
    type: int
  connect_timeout_s:
    description: Seconds to wait for the database connection (default V(10)).
    type: int
  timestamp_zone:
    description:
      - The IANA zone naive (C(timestamp without time zone)) columns were written in
        (default V(UTC)); never the session's C(TimeZone).
    type: str
  preset:
    description:
      - A job queue's stock schema and liveness rule (V(river), V(oban), V(pg-boss),
        V(graphile_worker), V(solid_queue), V(que), V(good_job)); every option set
        explicitly overrides the preset's value.
    type: str
"""
