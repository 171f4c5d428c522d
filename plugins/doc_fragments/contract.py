class ModuleDocFragment:
    # The claim contract. Each `default:` is the core's (tests/unit/test_doc_defaults.py); a
    # key a preset can set has none (it would override the preset): its description says it.
    DOCUMENTATION = r"""
options:
  table:
    description: Table holding the work rows. If not set, V(execution_runs), or the O(preset)'s.
    type: str
  schema:
    description: Schema of O(table). If not set, the O(preset)'s, else the connection's C(search_path) finds it.
    type: str
  relation_kind:
    description: What O(table) names. V(table) refuses a view, a materialized view or a foreign table; V(view) judges
      through a view, every relation it reads being a table whose row-level security hides no row from the guard's
      role, nor from the owner of each view on the way that is not C(security_invoker).
    type: str
    choices: [table, view]
    default: table
  id_column:
    description: Column identifying a row in reports. If not set, V(id), or the O(preset)'s.
    type: str
  status_column:
    description: Column holding the row's status, compared as text. If not set, V(status), or the O(preset)'s.
    type: str
  claimed_statuses:
    description: Statuses meaning a worker holds the row. If not set, V([running]), or the O(preset)'s.
    type: list
    elements: str
  queued_statuses:
    description: Statuses meaning nobody holds the row yet; never protected. If not set, V([open]), or the O(preset)'s.
    type: list
    elements: str
  finished_statuses:
    description: Statuses of rows nobody will run again. If not set, the O(preset)'s, else V([done, failed]) minus any
      claimed or queued status; only a list given here is checked against an enum's labels. A status in the table
      that is in none of the three lists fails the check; the lists must not overlap.
    type: list
    elements: str
  claimed_at_column:
    description: Column the worker sets when it takes (or renews) the claim. If not set, V(claimed_at), or the O(preset)'s.
    type: str
  lease:
    description: How long a claim stays valid.
    type: dict
    suboptions:
      multiplier:
        description: The lease is this many task timeouts (at least V(1)). If not set, V(2.0), or the O(preset)'s.
        type: float
      expires_at_column:
        description: A per-row lease expiry column; if not set, the multiplier rule. A NULL expiry is judged by
          C(claimed_at) + the lease (warned); C(infinity) never expires.
        type: str
  clock_skew_s:
    description: Tolerance when comparing the runtime start with C(claimed_at).
    type: float
    default: 0.0
  statement_timeout_ms:
    description: The guard query's own time budget.
    type: int
    default: 5000
  lock_timeout_ms:
    description: The guard query's lock wait, capped at O(statement_timeout_ms).
    type: int
    default: 2000
  timestamp_zone:
    description: The IANA zone naive (C(timestamp without time zone)) columns were written in. If not set, the
      O(preset)'s; with none, reading a naive column fails the check.
    type: str
  preset:
    description: A job queue's stock schema and liveness rule (V(river), V(oban), V(pg-boss), V(graphile_worker),
      V(solid_queue), V(que), V(good_job), V(procrastinate), V(pgmq)); options set explicitly override it.
    type: str
  kind_timeouts:
    description: River (O(preset=river)) only, job kinds whose worker sets its own C(Timeout()), each mapped to its
      seconds or V(unlimited); others take the lease.
    type: dict
    default: {}
"""
