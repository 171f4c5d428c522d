#!/usr/bin/python
# Documented in runtime_restart.yml beside this file; plugins/action/runtime_restart.py does the work.

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("runtime_restart")
