#!/usr/bin/python
# Documented in cron_budget.yml beside this file; plugins/action/cron_budget.py does the work.

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import action_only

if __name__ == "__main__":
    action_only("cron_budget")
