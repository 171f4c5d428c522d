# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # Where a host's task timeout and runtime start time are read; the defaults are the core's.
    DOCUMENTATION = r"""
options:
  task_timeout:
    description:
      - Where the protected system's task timeout is read on the host (the lease is
        C(lease.multiplier) times it). Only the one variable is extracted, never the rest
        of the environment (it holds secrets).
    type: dict
    suboptions:
      source:
        description:
          - V(docker)/V(podman) read the variable with C(inspect --format); V(systemd) the
            unit's C(Environment=); V(process) C(/proc/<pid>/environ); V(env_file) a file;
            V(command) runs O(task_timeout.command) in the container; V(fixed) is
            O(task_timeout.value_s). If not set, V(docker), or a C(preset)'s.
        type: str
        choices: [docker, podman, systemd, process, env_file, command, fixed]
      # container, unit and pid_file mean the same in runtime (YAML aliases there).
      container: &container
        description:
          - Container name or id, or a C(docker ps --filter) over RUNNING containers
            (C(label=KEY=VALUE), C(label=KEY), C(name=REGEX)); the OLDEST start and LONGEST
            task timeout of the matches count (all listed in the result); no match fails.
          - A named container with running compose siblings is judged alone, with a warning.
        type: str
        default: backend
      variable:
        description: Environment variable holding the timeout in seconds.
        type: str
        default: APP_TASK_TIMEOUT_S
      default_s:
        description: Assume this many seconds when the lookup finds nothing (the result says so), instead of failing.
        type: float
      value_s:
        description: The timeout in seconds for O(task_timeout.source=fixed).
        type: float
      unit: &unit
        description: The systemd unit; a glob (C(worker@*.service)) takes the OLDEST start and LONGEST task timeout of the ACTIVE matches (none fails).
        type: str
      pid_file: &pid_file
        description: The pid file, for source V(process).
        type: str
      path:
        description: The env file for O(task_timeout.source=env_file).
        type: str
      command:
        description: The argv run inside the container for O(task_timeout.source=command).
        type: list
        elements: str
        default: []
      engine:
        description: The container CLI that runs O(task_timeout.command).
        type: str
        choices: [docker, podman]
        default: docker
  runtime:
    description:
      - Where the worker runtime's start time is read. Claims made before it (less
        C(clock_skew_s)) are orphaned; without a start time none is (the safe direction).
    type: dict
    suboptions:
      source:
        description:
          - V(docker)/V(podman) read C(State.StartedAt); V(systemd) C(ActiveEnterTimestamp);
            V(process) the pid's start; V(fixed) is O(runtime.started_at); V(none) knows none.
        type: str
        choices: [docker, podman, systemd, process, fixed, none]
        default: docker
      container: *container
      unit: *unit
      pid_file: *pid_file
      started_at:
        description: An ISO 8601 timestamp with a timezone, for O(runtime.source=fixed).
        type: str
"""

    CHECK_VARS = r"""
options:
  check_vars:
    description:
      - First fail on a C(leaseguard_*) variable the collection does not know, as
        M(leaseguard.deploy.check_vars) does (with its C(checked) and C(unknown)), before
        anything is looked up; the guard role's tasks set it, saving a task per host.
    type: bool
    default: false
"""
