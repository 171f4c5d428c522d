#!/usr/bin/python
# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: lease_guard
short_description: Judge whether work is in flight on a host by the system's own claim lease
version_added: 0.1.0
description:
  - Classes every claimed or queued row of O(table) in the host's PostgreSQL (through an SSH tunnel) as C(queued),
    C(orphaned) (claimed before the runtime started), C(stale) (lease expired) or C(live). The decision is
    C(defer) when any row is live, else C(proceed).
  - The lease is O(lease.multiplier) times the task timeout configured on the host (looked up as
    M(leaseguard.deploy.task_timeout) does, or given with O(lookup)), never a guessed window.
  - The query is read-only, with its own C(statement_timeout) and C(lock_timeout). Any error fails the task naming
    what failed, never with C(proceed), and never shows a DSN, password or driver error text.
  - The guard reports and the playbook decides. With O(wait=true) it drains first, as C(fab drain) does.
author:
  - leaseguard maintainers (@leaseguard)
requirements:
  - the collection's requirements.txt (psycopg, PyYAML, fabric) on the controller
extends_documentation_fragment:
  - leaseguard.deploy.intake
  - leaseguard.deploy.contract
  - leaseguard.deploy.lookup
  - leaseguard.deploy.lookup.check_vars
  - leaseguard.deploy.connection
  - leaseguard.deploy.attributes.action_group
options:
  lookup:
    description: This host's registered M(leaseguard.deploy.task_timeout) result, so the host is not asked again.
    type: dict
  task_timeout_s:
    description: The task timeout in seconds, instead of looking it up (wins over O(lookup)).
    type: float
  runtime_started_at:
    description: When the worker runtime started, ISO 8601 with a timezone (wins over O(lookup)).
    type: str
  fleet_lookups:
    description:
      - For a global action (a migration, budgets, shared intake), judge once, with C(run_once), for every host of
        the play, from each host's registered M(leaseguard.deploy.task_timeout) result by host name.
      - The orphan cut-off is the oldest runtime start (compared in the database clock through each lookup's
        RV(leaseguard.deploy.task_timeout#module:clock)), the lease the longest task timeout; RV(fleet) names the
        host that supplied each. A host of C(ansible_play_hosts_all) without a successful lookup fails the task.
      - Mutually exclusive with O(lookup), O(task_timeout_s) and O(runtime_started_at).
    type: dict
  wait:
    description: Pause intake, poll until no live lease remains or the deadline passes, and resume intake on every
      exit path. The deadline is the longest remaining lease seen at the start, never longer.
    type: bool
    default: false
  deadline_s:
    description: Give up waiting sooner. If not set, the longest remaining lease seen at the start.
    type: float
  poll_s:
    description: Seconds between polls while waiting.
    type: float
    default: 5.0
  status_file:
    description: With O(wait), a JSON snapshot of the drain on the controller, rewritten after every poll (read it
      with C(leaseguard status PATH)); one path per drain, for example V(/var/tmp/drain-{{ inventory_hostname }}.json).
    type: path
  metrics_file:
    description: With O(wait), the drain's metrics in the Prometheus text format on the controller, one file per drain.
    type: path
  from_role_vars:
    description: Fill the contract, database and drain options the task does not set from the guard role's
      C(leaseguard_<option>) (C(leaseguard_drain_<option>) for the drain's timings and files).
    type: bool
    default: false
  fail_on_defer:
    description: Fail the task when the decision is C(defer); with O(each_host), when any host's is, naming them.
    type: bool
    default: false
  force:
    description: The caller will go ahead even if work is live; a C(defer) then adds RV(forced) and a warning naming
      every live claim that will be killed (with O(each_host), a warning for every deferring host).
    type: bool
    default: false
  held_intake:
    description: The registered M(leaseguard.deploy.intake_hold) result when the caller holds intake itself; the
      drain then pauses nothing, and RV(intake) says what was held.
    type: dict
  each_host:
    description:
      - With O(fleet_lookups) and C(run_once), judge each host of C(ansible_play_batch) by its own facts, in one query
        per poll through this task's host; each host's result is under RV(hosts).
      - Every host must reach the same database, and holds its intake through O(held_intakes).
    type: bool
    default: false
  held_intakes:
    description: With O(each_host), each host's registered M(leaseguard.deploy.intake_hold) result by host name.
    type: dict
attributes:
  check_mode:
    support: partial
    description: The check is read-only and runs for real in check mode.
    details: With O(wait=true) it judges once instead of draining.
notes:
  - C(leaseguard index-sql) prints the index that keeps the query cheap on large tables.
seealso:
  - module: leaseguard.deploy.task_timeout
  - module: leaseguard.deploy.cron_budget
"""

EXAMPLES = r"""
- name: Look up the task timeout
  leaseguard.deploy.task_timeout:
  register: timeout_lookup

- name: Judge the host's claims through an SSH tunnel to its database
  leaseguard.deploy.lease_guard:
    lookup: "{{ timeout_lookup }}"
    db_name: app
    db_user: leaseguard_ro
  register: guard

- name: Restart only when nothing is in flight
  ansible.builtin.command: docker restart backend
  changed_when: true
  when: guard.decision == 'proceed'

# The lookup above ran on every host of the play: judge a migration once for the fleet.
- name: Judge a migration once for every host of the play
  leaseguard.deploy.lease_guard:
    fleet_lookups: >-
      {{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)
         | map(attribute='timeout_lookup', default={}))) }}
    db_name: app
    fail_on_defer: true
  run_once: true

- name: Drain before a restart, pausing the claim job meanwhile
  leaseguard.deploy.lease_guard:
    lookup: "{{ timeout_lookup }}"
    db_name: app
    wait: true
    pause_cron_jobs: [claim]
    fail_on_defer: true
"""

RETURN = r"""
hosts:
  description: With O(each_host), every host's own result by name; a failed host has C(failed) and RV(error).
  returned: with each_host
  type: dict
  sample: {"app1": {"decision": "proceed", "counts": {"live": 0, "stale": 0, "orphaned": 1, "queued": 3}}}
summary:
  description: With O(each_host), how many hosts got each decision.
  returned: with each_host
  type: str
  sample: "hosts: defer 1, proceed 19"
decision:
  description: C(proceed), C(defer) (a live lease remains) or C(failed).
  returned: always
  type: str
  sample: defer
host:
  description: The inventory host judged (V(fleet) with O(fleet_lookups)).
  returned: always
  type: str
  sample: app1
table:
  description: The table judged.
  returned: success
  type: str
  sample: execution_runs
lease_s:
  description: The lease in seconds (null with a per-row expiry column).
  returned: success
  type: float
  sample: 7200.0
task_timeout_s:
  description: The task timeout the lease was computed from.
  returned: success
  type: float
  sample: 3600.0
task_timeout_source:
  description: Where the task timeout came from.
  returned: success
  type: str
  sample: docker:backend/APP_TASK_TIMEOUT_S
task_timeout_assumed:
  description: Whether the timeout was assumed from O(task_timeout.default_s).
  returned: success
  type: bool
  sample: false
runtime_started_at:
  description: The runtime start time used for the orphan cut-off.
  returned: success
  type: str
  sample: "2026-09-09T04:00:00+00:00"
checked_at:
  description: The database's C(now()) at the check.
  returned: success
  type: str
  sample: "2026-09-09T14:48:57+00:00"
clock_offset_s:
  description: The host clock minus the database clock; null when not measured.
  returned: success
  type: float
  sample: 0.004
counts:
  description: Rows per class.
  returned: success
  type: dict
  sample: {"live": 1, "stale": 0, "orphaned": 0, "queued": 3}
live:
  description: The live claims (at most 100, longest remaining lease first).
  returned: success
  type: list
  elements: dict
  sample: [{"id": "42", "claimed_at": "2026-09-09T13:18:57+00:00", "lease_expires_at": "2026-09-09T15:18:57+00:00", "remaining_s": 1800.0}]
live_listed:
  description: How many live claims RV(live) lists.
  returned: success
  type: int
  sample: 1
wait_upper_bound_s:
  description: The longest remaining lease (0 when nothing is live).
  returned: success
  type: float
  sample: 1800.0
fleet:
  description: With O(fleet_lookups), the hosts judged, the hosts that supplied the lease and the orphan cut-off,
    and each host's clock minus the database's.
  returned: success, with O(fleet_lookups)
  type: dict
  sample: {"hosts": ["app1", "app2"], "lease_from": "app2", "orphan_cutoff_from": "app2", "clock_offsets_s": {"app1": 0.003, "app2": -0.002}}
replicas:
  description: Every container or unit a filter or glob matched (with O(fleet_lookups) as C(host:name)).
  returned: success, when a filter or glob matched
  type: list
  elements: str
  sample: ["proj-worker-1", "proj-worker-2"]
lookup:
  description: This host's facts as M(leaseguard.deploy.task_timeout) returns them.
  returned: success, without O(fleet_lookups)
  type: dict
  sample: {"task_timeout_s": 3600.0, "source": "docker:backend/APP_TASK_TIMEOUT_S", "assumed": false, "runtime_started_at": "2026-09-09T04:00:00+00:00"}
intake:
  description: What stopped new claims between this verdict and the caller's action (C(held) false when nothing did).
  returned: success
  type: dict
  sample: {"held": true, "what": ["pg_cron:claim"]}
forced:
  description: True when O(force) was set and work was live.
  returned: when forced
  type: bool
  sample: true
drain:
  description: With O(wait), how the wait went.
  returned: when O(wait) and not in check mode
  type: dict
  sample: {"decision": "proceed", "drained": true, "elapsed_s": 12.4, "deadline_s": 1800.0, "events": ["drain host=app1 start live=1"]}
error:
  description: What failed; names the host, table, column or variable, never a secret.
  returned: failure
  type: dict
  sample: {"type": "DatabaseUnavailable", "message": "host app1: cannot connect to the database (OperationalError)"}
"""

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("lease_guard")
