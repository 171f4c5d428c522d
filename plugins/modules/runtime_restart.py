#!/usr/bin/python
# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: runtime_restart
short_description: Restart a host's worker runtime with a stop budget and check that it restarted
version_added: 0.1.0
description:
  - Restarts the runtime (a container, a systemd unit, or a command) giving it O(stop_timeout_s) between SIGTERM
    and SIGKILL, then reads its start time until it moved past the one in O(lookup) (else, after
    O(verify_timeout_s), the task fails). V(systemd) carries the stop budget in a temporary drop-in.
author:
  - leaseguard maintainers (@leaseguard)
requirements:
  - the collection's requirements.txt (psycopg, PyYAML, fabric) on the controller; the host needs a POSIX shell, no Python
extends_documentation_fragment:
  - leaseguard.deploy.lookup
  - leaseguard.deploy.connection
  - leaseguard.deploy.connection.unused
  - leaseguard.deploy.attributes.action_group
options:
  method:
    description: How to restart.
    type: str
    required: true
    choices: [docker, podman, systemd, command]
  container:
    description: The container to restart, for V(docker) and V(podman) (required there).
    type: str
  unit:
    description: The systemd unit to restart, for V(systemd) (required there).
    type: str
  command:
    description: The argv that restarts the runtime, for V(command) (required there); it gets the stop budget in E(LEASEGUARD_STOP_TIMEOUT_S).
    type: list
    elements: str
    default: []
  stop_timeout_s:
    description: Seconds between SIGTERM and SIGKILL (C(docker restart --time), C(TimeoutStopSec)).
    type: int
    default: 10
  verify_timeout_s:
    description: How long the new start time may take to appear (read every 2 s); not checked for runtime sources V(none) and V(fixed).
    type: int
    default: 60
  lookup:
    description: The registered M(leaseguard.deploy.task_timeout) result from before the restart, whose
      C(runtime_started_at) must move. Required unless the runtime source is V(none) or V(fixed).
    type: dict
attributes:
  check_mode:
    support: full
    description: Runs nothing in check mode; reports what it would restart, as changed.
seealso:
  - module: leaseguard.deploy.lease_guard
"""

EXAMPLES = r"""
- name: Look up the start time the restart must move
  leaseguard.deploy.task_timeout:
  register: before

- name: Restart the backend container, giving it 30 s to stop
  leaseguard.deploy.runtime_restart:
    method: docker
    container: backend
    stop_timeout_s: 30
    lookup: "{{ before }}"
"""

RETURN = r"""
restarted:
  description: What was restarted; C(cmd) is the argv run on the host and C(rc) its exit status (both null in check mode).
  returned: always
  type: dict
  sample: {"method": "docker", "target": "docker container backend", "cmd": ["docker", "restart", "--time", "10", "backend"], "rc": 0}
stop_timeout_s:
  description: The stop budget given to the restart, in seconds.
  returned: always
  type: int
  sample: 10
before:
  description: The start time before the restart, from O(lookup).
  returned: when the restart succeeded
  type: dict
  sample: {"runtime_started_at": "2026-09-09T04:00:00.123456+00:00", "runtime_started_epoch_s": 1788926400.123456}
after:
  description: The start time read after the restart (null values when none was found).
  returned: when the restart succeeded and the runtime source reads a start time
  type: dict
  sample: {"runtime_started_at": "2026-09-09T05:00:01.5+00:00", "runtime_started_epoch_s": 1788930001.5}
msg:
  description: What happened, or why the task failed.
  returned: always
  type: str
  sample: "leaseguard: restarted app1 (runtime started 2026-09-09T04:00:00.123456+00:00 -> 2026-09-09T05:00:01.5+00:00, stop budget 10 s)"
"""

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("runtime_restart")
