#!/usr/bin/python
# Documented in intake_hold.yml beside this file; plugins/action/intake_hold.py does the work.

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("intake_hold")
