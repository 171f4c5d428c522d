#!/usr/bin/python
# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: intake_hold
short_description: Hold intake from before a verdict until the action is verified done
version_added: 0.1.0
description:
  - Between a V(proceed) and a restart or migration a busy intake claims work the action then kills. This module
    holds intake from before the final verdict (O(state=held)) and lets go of exactly that hold once the action is
    verified (O(state=released)).
  - Intake is pg_cron jobs (O(pause_cron_jobs)) and/or a command on the host (O(pause_command)). Holds are counted
    in C(cron.job), so a job comes back only when its last holder lets go; one an operator paused stays paused.
  - Runs in progress are waited for up to O(quiet_timeout_s), else the hold fails. A hold never released is named
    by every later check and given back by C(leaseguard resume) or the C(leaseguard.deploy.resume) playbook.
author:
  - leaseguard maintainers (@leaseguard)
requirements:
  - the leaseguard Python package on the controller
  - pg_cron in the database named by O(cron_database), for O(pause_cron_jobs)
extends_documentation_fragment:
  - leaseguard.deploy.intake
  - leaseguard.deploy.connection
  - leaseguard.deploy.attributes.action_group
options:
  state:
    description: V(held) takes the hold; V(released) lets go of the hold given in O(hold).
    type: str
    required: true
    choices: [held, released]
  hold:
    description: With O(state=released), the RV(hold) the O(state=held) task returned.
    type: dict
  action:
    description: What the hold is for, recorded with it.
    type: str
    default: restart
  quiet_timeout_s:
    description: How long to wait for runs of the held jobs already in progress to end.
    type: float
    default: 120.0
  from_role_vars:
    description: Fill the options the task does not set from the roles' C(leaseguard_*) variables.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Holds nothing in check mode.
seealso:
  - module: leaseguard.deploy.lease_guard
"""

EXAMPLES = r"""
- name: Restart with intake held from before the verdict until the restart is verified
  block:
    - name: Hold intake
      leaseguard.deploy.intake_hold:
        state: held
        action: restart
        pause_cron_jobs: [claim]
        cron_database: postgres
        cron_user: app_owner
      register: intake

    - name: Judge, with intake held
      leaseguard.deploy.lease_guard:
        held_intake: "{{ intake }}"
        fail_on_defer: true

    - name: Restart and verify the new start time
      leaseguard.deploy.runtime_restart:
        method: docker
        container: backend
  always:
    - name: Give intake back
      leaseguard.deploy.intake_hold:
        state: released
        hold: "{{ intake.hold }}"
        cron_database: postgres
        cron_user: app_owner
      when: intake.hold | default(none) is not none
"""

RETURN = r"""
hold:
  description: What this task holds, to pass as O(hold) when released (null when nothing is); C(what) names it all.
  returned: O(state=held)
  type: dict
  sample: {"cron": {"token": "9f1c2a7b3d4e", "jobs": ["claim"], "jobids": [3], "switched": ["claim"]}, "command": false, "what": ["pg_cron:claim"]}
paused:
  description: The pg_cron jobs this hold switched off.
  returned: O(state=held)
  type: list
  elements: str
resumed:
  description: The pg_cron jobs this release switched back on (none while another holder holds them).
  returned: O(state=released)
  type: list
  elements: str
released:
  description: What this task let go of.
  returned: O(state=released)
  type: list
  elements: str
  sample: ["pg_cron:claim"]
events:
  description: The hold's state changes as logged.
  returned: always
  type: list
  elements: str
  sample: ["intake paused pg_cron job=claim by=ansible-playbook restart (app1) pid 4242 on ctl"]
error:
  description: What failed; the message names the job, the role and what to do.
  returned: failure
  type: dict
  sample: {"type": "DatabaseError", "message": "pg_cron job(s) not found: claim (as role guard_ro; ...)"}
"""

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("intake_hold")
