"""Private to leaseguard.deploy: module argument specs from their DOCUMENTATION; guard variables."""

import copy
import importlib
import os
from functools import lru_cache

from ansible.module_utils.basic import AnsibleModule, env_fallback

PLUGINS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENTS = "ansible_collections.leaseguard.deploy.plugins.doc_fragments"
_SPEC_KEYS = ("type", "default", "elements", "choices", "required")
# Never logged, and read from the controller's environment when not given.
_SECRETS_AND_FALLBACKS = {
    "dsn": dict(no_log=True, fallback=(env_fallback, ["LEASEGUARD_DSN"])),
    "db_name": dict(fallback=(env_fallback, ["PGDATABASE"])),
    "db_user": dict(fallback=(env_fallback, ["PGUSER"])),
    "db_password": dict(
        no_log=True, fallback=(env_fallback, ["LEASEGUARD_DB_PASSWORD", "PGPASSWORD"])
    ),
    "cron_password": dict(no_log=True, fallback=(env_fallback, ["LEASEGUARD_CRON_PASSWORD"])),
}
_ONE_HOSTS_FACTS = ("lookup", "task_timeout_s", "runtime_started_at")
RULES = {  # validate_argument_spec's other options, per module
    "lease_guard": dict(
        required_together=[("pause_command", "resume_command")],
        mutually_exclusive=[("fleet_lookups", fact) for fact in _ONE_HOSTS_FACTS],
    ),
    "cron_budget": dict(required_one_of=[("jobs", "active", "resume_recorded")]),
    "intake_hold": dict(required_together=[("pause_command", "resume_command")]),
}


@lru_cache(maxsize=None)
def documented_options(module):
    """The module's options with its doc fragments merged, as ansible-doc shows them."""
    import yaml  # here: ansible-test imports this file where PyYAML is absent

    with open(os.path.join(PLUGINS, "modules", f"{module}.yml"), encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        name, _dot, variant = fragment.removeprefix("leaseguard.deploy.").partition(".")
        fragment = importlib.import_module(f"{FRAGMENTS}.{name}").ModuleDocFragment
        text = getattr(fragment, (variant or "documentation").upper())
        options.update(yaml.safe_load(text).get("options") or {})
    options.update(doc.get("options") or {})
    return options


def spec_of(options):
    return {
        name: {
            **{key: option[key] for key in _SPEC_KEYS if key in option},
            **({"options": spec_of(option["suboptions"])} if "suboptions" in option else {}),
            **_SECRETS_AND_FALLBACKS.get(name, {}),
        }
        for name, option in options.items()
    }


def module_spec(module):
    """The module's argument spec and validate_argument_spec's other options (fresh copies)."""
    return spec_of(copy.deepcopy(documented_options(module))), copy.deepcopy(RULES.get(module, {}))


# What each task's caller decides (or one host's facts): never filled from a role variable,
# even one the role declares (a deployment-wide leaseguard_force would force every guard).
_PER_TASK = {*_ONE_HOSTS_FACTS, "wait", "force", "fail_on_defer", "check_vars", "from_role_vars"}
_PER_TASK |= {"each_host", "held_intake", "held_intakes", "state", "hold", "action"}


def role_variables(module):
    """Option -> its guard role variable: leaseguard_drain_<option>, else leaseguard_<option>."""
    options = documented_options(module)
    if "from_role_vars" not in options:
        return {}
    declared = guard_role_options()
    found = {
        option: [n for n in (f"leaseguard_drain_{option}", f"leaseguard_{option}") if n in declared]
        for option in set(options) - _PER_TASK
    }
    return {option: names[0] for option, names in found.items() if names}


@lru_cache(maxsize=1)
def guard_role_options():
    """The guard role's variables (roles/guard/meta/argument_specs.yml), which every role reads."""
    import yaml  # here: ansible-test imports this file where PyYAML is absent

    specs = os.path.join(os.path.dirname(PLUGINS), "roles", "guard", "meta", "argument_specs.yml")
    with open(specs, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["argument_specs"]["main"]["options"]


def action_only(name):
    """Fails a module whose work is action/<name>.py's; validate-modules checks this spec."""
    try:
        argument_spec, rules = module_spec(name)
    except ImportError:  # no PyYAML where the module itself runs: nothing to check it with
        argument_spec, rules = {}, {}
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **rules)
    module.fail_json(msg=f"leaseguard.deploy.{name} runs as an action plugin on the controller")
