#!/usr/bin/python
# Documented in check_vars.yml beside this file; plugins/action/check_vars.py does the work.

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("check_vars")
