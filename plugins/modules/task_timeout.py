#!/usr/bin/python
# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: task_timeout
short_description: Look up a host's configured task timeout and its runtime start time
version_added: 0.1.0
description:
  - Reads the task timeout the protected system is configured with on this host and when its worker runtime
    started, in one command through the task's connection (the host needs no Python).
  - A lookup that finds nothing fails the task unless O(task_timeout.default_s) is set.
author:
  - leaseguard maintainers (@leaseguard)
requirements:
  - the collection's requirements.txt (psycopg, PyYAML, fabric) on the controller
extends_documentation_fragment:
  - leaseguard.deploy.lookup
  - leaseguard.deploy.lookup.check_vars
  - leaseguard.deploy.connection
  - leaseguard.deploy.connection.unused
  - leaseguard.deploy.attributes.action_group
  - leaseguard.deploy.attributes.read_only
seealso:
  - module: leaseguard.deploy.lease_guard
"""

EXAMPLES = r"""
- name: Every running replica of a compose service
  leaseguard.deploy.task_timeout:
    task_timeout:
      source: docker
      container: label=com.docker.compose.service=worker
    runtime:
      source: docker
      container: label=com.docker.compose.service=worker
  register: replicas_lookup

- name: A systemd service, assuming one hour when the unit does not say
  leaseguard.deploy.task_timeout:
    task_timeout:
      source: systemd
      unit: worker.service
      variable: TASK_TIMEOUT_S
      default_s: 3600
    runtime:
      source: systemd
      unit: worker.service
"""

RETURN = r"""
task_timeout_s:
  description: The configured task timeout, in seconds.
  returned: success
  type: float
  sample: 3600.0
source:
  description: Where the value came from; C(default:...) when assumed.
  returned: success
  type: str
  sample: docker:backend/APP_TASK_TIMEOUT_S
assumed:
  description: Whether the lookup found nothing and O(task_timeout.default_s) was used.
  returned: success
  type: bool
  sample: false
replicas:
  description: What a C(container) filter or C(unit) glob matched; empty for one named container or unit.
  returned: success
  type: list
  elements: str
  sample: ["proj-worker-1", "proj-worker-2"]
runtime_started_at:
  description: When the worker runtime started (ISO 8601, UTC offset); null when unknown.
  returned: success
  type: str
  sample: "2026-09-09T04:00:00.123456+00:00"
runtime_started_epoch_s:
  description: The same moment in seconds since the epoch.
  returned: success
  type: float
  sample: 1788926400.123456
clock:
  description: This host's clock minus the controller's (C(offset_s)), C(uncertainty_s) half the round trip.
  returned: success, when RV(runtime_started_at) is known
  type: dict
  sample: {"offset_s": 0.004, "uncertainty_s": 0.012}
error:
  description: What failed; the message names the host, source and variable, never a value.
  returned: failure
  type: dict
  sample: {"type": "LookupFailed", "message": "host app1: docker:backend/APP_TASK_TIMEOUT_S: variable APP_TASK_TIMEOUT_S is not set"}
"""

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("task_timeout")
