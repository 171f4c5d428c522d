#!/usr/bin/python
# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: check_vars
short_description: Fail on a leaseguard_* variable that the collection does not know
version_added: 0.1.0
description:
  - Ansible silently drops a variable nothing reads, such as a mistyped C(leaseguard_on_bussy). An unknown
    C(leaseguard_*) variable fails the task, naming it and the nearest known name.
author:
  - leaseguard maintainers (@leaseguard)
options:
  allow:
    description: Further C(leaseguard_*) names to accept (your own variables in the namespace).
    type: list
    elements: str
    default: []
  restart:
    description: The restart the C(restart) role will run; an empty setting its method needs fails the task,
      naming the role's variable.
    type: dict
    suboptions:
      method:
        description: The restart method (C(leaseguard_restart_method)).
        type: str
        required: true
        choices: [docker, podman, systemd, command]
      container:
        description: The container (C(leaseguard_restart_container)).
        type: str
        default: ""
      command:
        description: The restart command's argv (C(leaseguard_restart_command)).
        type: list
        elements: str
        default: []
      unit:
        description: The systemd unit (C(leaseguard_restart_unit)).
        type: str
        default: ""
extends_documentation_fragment:
  - leaseguard.deploy.attributes.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Runs on the controller.
seealso:
  - module: leaseguard.deploy.lease_guard
"""

EXAMPLES = r"""
- name: Fail on a mistyped leaseguard variable before anything runs
  leaseguard.deploy.check_vars:

- name: Also accept a variable of your own in the leaseguard_ namespace
  leaseguard.deploy.check_vars:
    allow: [leaseguard_release_tag]

- name: Also check that the restart the restart role will run is configured
  leaseguard.deploy.check_vars:
    restart:
      method: command
      command: [/usr/local/bin/restart-worker]
"""

RETURN = r"""
checked:
  description: The C(leaseguard_*) variables that were checked, sorted.
  returned: always
  type: list
  elements: str
  sample: [leaseguard_db_name, leaseguard_on_busy]
unknown:
  description: The unknown ones, each with the nearest known name (null when none is close).
  returned: failure
  type: dict
  sample: {"leaseguard_on_bussy": "leaseguard_on_busy"}
"""

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("check_vars")
