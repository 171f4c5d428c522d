# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # Attributes the modules share; a module's own description wins.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
"""

    ACTION_GROUP = r"""
options: {}
attributes:
  action_group:
    support: full
    membership:
      - leaseguard.deploy.leaseguard
    description: Use C(group/leaseguard.deploy.leaseguard) in C(module_defaults) to set shared options once.
  diff_mode:
    support: none
    description: Nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller; commands run on the host through the task's connection.
"""
