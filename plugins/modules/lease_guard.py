#!/usr/bin/python
# Documented in lease_guard.yml beside this file; plugins/action/lease_guard.py does the work.

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("lease_guard")
