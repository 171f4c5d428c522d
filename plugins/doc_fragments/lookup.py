class ModuleDocFragment:
    # Where a host's task timeout and runtime start time are read; the defaults are the core's.
    DOCUMENTATION = r"""
options:
  task_timeout:
    description: Where the protected system's task timeout is read on the host; only that one variable is read.
    type: dict
    suboptions:
      source:
        description: V(docker)/V(podman) C(inspect) the container; V(systemd) reads the unit's C(Environment=);
          V(process) C(/proc/<pid>/environ); V(env_file) a file; V(command) runs O(task_timeout.command) in the
          container; V(fixed) is O(task_timeout.value_s). If not set, V(docker), or a C(preset)'s.
        type: str
        choices: [docker, podman, systemd, process, env_file, command, fixed]
      container: &container
        description: Container name or id, or a C(docker ps --filter) over running containers (C(label=KEY=VALUE),
          C(label=KEY), C(name=REGEX)) whose oldest start and longest timeout count; no match fails.
        type: str
        default: backend
      variable:
        description: Environment variable holding the timeout in seconds.
        type: str
        default: APP_TASK_TIMEOUT_S
      default_s:
        description: Assume this many seconds when the lookup finds nothing, instead of failing.
        type: float
      value_s:
        description: The timeout in seconds for O(task_timeout.source=fixed).
        type: float
      unit: &unit
        description: The systemd unit; a glob (C(worker@*.service)) takes the oldest start and longest timeout of the active matches.
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
    description: Where the worker runtime's start time is read; claims made before it are orphaned.
    type: dict
    suboptions:
      source:
        description: V(docker)/V(podman) read C(State.StartedAt); V(systemd) C(ActiveEnterTimestamp); V(process) the
          pid's start; V(fixed) is O(runtime.started_at); V(none) knows none (no claim is orphaned).
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
    description: First fail on an unknown C(leaseguard_*) variable, as M(leaseguard.deploy.check_vars) does.
    type: bool
    default: false
"""
