#!/usr/bin/python
# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: cron_budget
short_description: Declare pg_cron jobs' statement budgets per environment, without silent reverts
version_added: 0.1.0
description:
  - Creates or updates pg_cron jobs whose command sets C(statement_timeout) to the job's
    budget, then selects its function; an environment's O(overrides) win over O(jobs).
  - A live budget differing from an undeclared default (B(drift)), a live command outside the
    template, or a name shared by several jobs makes the task B(fail) and write no job at
    all (drift is written with O(on_drift=apply)). Lowering a live budget always warns.
author: leaseguard maintainers (@leaseguard)
requirements:
  - the collection's requirements.txt (psycopg, PyYAML, fabric) on the controller
  - pg_cron 1.4 or later in the database named by O(cron_database)
extends_documentation_fragment:
  - leaseguard.deploy.connection
  - leaseguard.deploy.attributes.action_group
options:
  jobs:
    description: The jobs by name, each C(schedule), C(function) (C(schema.name), lower case)
      and default C(budget) (V(3s), V(1500ms), V(1min) or ms). Other jobs are left alone.
    type: dict
  overrides:
    description: This environment's budgets by job name (e.g. C(publish=6s)); needs O(environment).
    type: dict
  environment:
    description: The environment whose O(overrides) these are, e.g. V(production).
    type: str
  on_drift:
    description: Drift from a default; V(report) fails the task and changes nothing, V(apply) overwrites it.
    type: str
    choices: [report, apply]
    default: report
  cron_database:
    description: The database holding C(cron.job) (C(cron.database_name)); if not set, O(db_name).
    type: str
  active:
    description: Jobs' active flag by name (V(false) pauses, V(true) resumes), set after O(jobs);
      a missing job is skipped with a warning.
    type: dict
  resume_recorded:
    description: Give back the intake pauses drains recorded, as C(leaseguard resume) does.
    type: bool
    default: false
attributes:
  check_mode: {support: full, description: "The same plan and C(changed), read-only."}
  diff_mode: {support: full, description: "Before and after of each declared job."}
  platform:
    support: full
    platforms: posix
    description: Runs on the controller; the database is reached through the host.
notes:
  - The CLI counterpart is C(leaseguard budgets --config FILE [--apply]) (exit 3 where this task fails).
seealso:
  - module: leaseguard.deploy.lease_guard
"""

EXAMPLES = r"""
- name: Declare the projection pipeline's budgets (production keeps publish at 6s)
  leaseguard.deploy.cron_budget:
    jobs:
      claim: {schedule: "* * * * *", function: public.claim_stats_projection_job_v1, budget: 3s}
      publish: {schedule: "* * * * *", function: public.publish_stats_projection_job_v1, budget: 3s}
    overrides: "{{ leaseguard_cron_budget_overrides | default({}) }}"  # {publish: 6s} in production
    environment: "{{ leaseguard_environment }}"
    cron_database: postgres
    db_name: app

- name: Pause the claim job during a migration
  leaseguard.deploy.cron_budget:
    active: {claim: false}
    cron_database: postgres
    db_name: app
  register: paused

- name: Resume exactly the jobs that were paused
  leaseguard.deploy.cron_budget:
    active: "{{ dict(paused.paused | product([true])) }}"
    cron_database: postgres
    db_name: app
  when: paused.paused | length > 0
"""

RETURN = r"""
environment: {description: "The environment whose overrides were applied.", returned: when O(jobs) is given, type: str}
on_drift: {description: "The drift policy used.", returned: when O(jobs) is given, type: str}
applied: {description: "Whether the plan was written (false in check mode and when the task refused).", returned: always, type: bool}
jobs:
  description: One entry per declared job; C(state) is V(create), V(update), V(unchanged),
    V(drift), V(unparseable) or V(ambiguous).
  returned: when O(jobs) is given
  type: list
  elements: dict
  sample:
    - {job: publish, state: unchanged, live_budget: 6s, declared_budget: 6s, default_budget: 3s,
       source: "override:production", function: public.publish_stats_projection_job_v1,
       schedule: "* * * * *", changes: [], reason: "", before: {}, after: {}}
drift:
  description: Live budgets differing from an undeclared default; C(applied) with O(on_drift=apply).
  returned: when O(jobs) is given
  type: list
  elements: dict
  sample: [{"job": "publish", "live": "6s", "declared": "3s", "source": "default", "applied": false}]
paused:
  description: Jobs this run deactivated through O(active) (resume exactly these).
  returned: when O(active) is given
  type: list
  elements: str
records:
  description: The recorded pauses found (job, paused_at, by), with O(resume_recorded).
  returned: when O(resume_recorded)
  type: list
  elements: dict
resumed:
  description: Jobs this run activated through O(active) or O(resume_recorded).
  returned: when O(active) or O(resume_recorded) is given
  type: list
  elements: str
missing:
  description: Jobs named in O(active) that do not exist (skipped, with a warning).
  returned: when O(active) is given
  type: list
  elements: str
diff: {description: "Before and after per job, shown with C(--diff).", returned: success, type: dict}
msg: {description: "A one-line summary, or on failure what failed and how to go on.", returned: always, type: str}
error:
  description: What failed (connection, privileges, pg_cron); never a secret.
  returned: on a database or configuration failure
  type: dict
  sample: {"type": "ConfigError", "message": "cron_budgets.jobs.publish.budget must be greater than 0, got '-1s'"}
"""

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("cron_budget")
