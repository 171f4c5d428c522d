# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # Where a host's configured task timeout and its runtime start time are read. The
    # defaults are the core's (tests/unit/test_doc_defaults.py keeps them equal).
    DOCUMENTATION = r"""
options:
  task_timeout:
    description:
      - Where the protected system's configured task timeout is read on the host.
      - The lease is C(lease.multiplier) times this value.
      - Only the one variable is ever extracted; the rest of a container's or process's
        environment (it holds secrets) is never returned.
    type: dict
    suboptions:
      source:
        description:
          - V(docker) or V(podman) read the one variable of the container's environment with
            C(inspect --format) (a Go template that prints only that variable on the host).
          - V(systemd) reads the unit's C(Environment=); V(process) reads
            C(/proc/<pid>/environ) of the pid in O(task_timeout.pid_file); V(env_file) reads
            O(task_timeout.path); V(command) runs O(task_timeout.command) inside the container
            and parses its output; V(fixed) uses O(task_timeout.value_s).
          - If not set, V(docker); with a C(preset) (M(leaseguard.deploy.lease_guard)), the preset's.
        type: str
        choices: [docker, podman, systemd, process, env_file, command, fixed]
      # container, unit and pid_file mean the same in runtime (YAML aliases there).
      container: &container
        description:
          - Container name or id.
          - For V(docker) and V(podman), also a filter over the RUNNING containers, as
            C(docker ps --filter) matches, C(label=KEY=VALUE) (or C(label=KEY)) or
            C(name=REGEX). The start time is then the OLDEST of the matches, the task timeout
            the LONGEST; no match fails, naming the filter; the result lists every match.
          - A single named container with running compose siblings (same
            C(com.docker.compose.project) and C(com.docker.compose.service) labels) is judged
            alone, with a warning naming the siblings.
        type: str
        default: backend
      variable:
        description: Environment variable holding the timeout in seconds.
        type: str
        default: APP_TASK_TIMEOUT_S
      default_s:
        description:
          - Assume this many seconds when the lookup finds nothing, instead of failing.
          - The result then says the value was assumed.
        type: float
      value_s:
        description: The timeout in seconds for O(task_timeout.source=fixed).
        type: float
      unit: &unit
        description:
          - The systemd unit, for source V(systemd).
          - A glob (C(worker@*.service)) reads every ACTIVE unit it matches, and takes the OLDEST start and
            the LONGEST task timeout; no active match fails, naming the glob.
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
      - Where the start time of the worker runtime is read. Claims made before it (less
        C(clock_skew_s)) belong to a process that no longer exists, so they are orphaned.
      - Without a start time nothing is classed orphaned (the safe direction).
    type: dict
    suboptions:
      source:
        description:
          - V(docker)/V(podman) read C(State.StartedAt); V(systemd) the unit's
            C(ActiveEnterTimestamp); V(process) the start of the pid in O(runtime.pid_file);
            V(fixed) uses O(runtime.started_at); V(none) knows no start time.
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

    # The guard role's tasks check the leaseguard_* names in the same task (one worker per
    # host instead of two).
    CHECK_VARS = r"""
options:
  check_vars:
    description:
      - First fail on a C(leaseguard_*) variable the collection does not know, exactly as
        M(leaseguard.deploy.check_vars) does, before anything is looked up or judged. The
        failed result then carries the C(checked) and C(unknown) that
        M(leaseguard.deploy.check_vars) returns. The guard role's tasks set it, so the name
        check costs no task of its own.
    type: bool
    default: false
"""
