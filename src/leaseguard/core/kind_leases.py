"""Per-kind leases (River's workers with their own Timeout()), bound as parameters.

River's rescuer (riverqueue/river internal/maintenance/job_rescuer.go, v0.43.0) fetches the
`running` jobs whose attempted_at is older than RescueStuckJobsAfter, then, per job, asks its
kind's worker for Timeout() (0: the client's JobTimeout): -1 means never rescue it, and a
positive timeout that has not yet elapsed since attempted_at leaves it running. So a kind
with its own timeout T is stale once max(RescueStuckJobsAfter, T) has passed, and a kind
with none (-1, `unlimited`) never is. The kinds and their timeouts are arrays bound as
parameters: no kind name or number is ever written into the SQL.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.presets import kind_column


def kind_expiry(contract: Contract, lease: sql.Composable) -> sql.Composable:
    """River with per-kind timeouts (internal/maintenance/job_rescuer.go makeRetryDecision):
    a kind whose worker's Timeout() is -1 is never rescued (NULL: no expiry, live); one with
    its own timeout is rescued once both it and RescueStuckJobsAfter (the subject's lease)
    have passed; other kinds take the lease."""
    # The unnest's columns are named apart from the table's, so `kind` is the job's own.
    kind = sql.Identifier(kind_column(contract.preset))
    return sql.SQL(
        "CASE WHEN {kind} = ANY(%(unlimited_kinds)s::text[]) THEN NULL::timestamptz "
        "ELSE {claimed_at}::timestamptz + coalesce((SELECT greatest(k.kind_timeout, {lease}) "
        "FROM unnest(%(kinds)s::text[], %(kind_timeouts)s::interval[]) "
        "AS k(job_kind, kind_timeout) WHERE k.job_kind = {kind}), {lease}) END"
    ).format(kind=kind, claimed_at=sql.Identifier(contract.claimed_at_column), lease=lease)


def kind_params(contract: Contract) -> dict[str, Any]:
    """The kind_timeouts as three arrays (values bound, never written into the SQL)."""
    if not contract.kind_timeouts:
        return {}
    timed = [(kind, s) for kind, s in contract.kind_timeouts.items() if s is not None]
    return {
        "unlimited_kinds": [kind for kind, s in contract.kind_timeouts.items() if s is None],
        "kinds": [kind for kind, _ in timed],
        "kind_timeouts": [timedelta(seconds=s) for _, s in timed],
    }
