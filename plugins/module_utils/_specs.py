# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the argument specs its modules and action plugins share.

The core owns every default; they are repeated here so that `ansible-doc` shows them (this
file imports without the core, for ansible-test), and tests/unit/test_doc_defaults.py fails
when one differs from the core's or from DOCUMENTATION. A key a preset can set, or whose
effective default depends on other keys (db_host/db_port: one DSN is one database), has none.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule, env_fallback


def typed(**types):
    """Options that have a type and nothing else (no default, choices or fallback)."""
    return {name: dict(type=kind) for name, kind in types.items()}


def str_list(**defaults):
    return {name: dict(type="list", elements="str", default=d) for name, d in defaults.items()}


def contract_spec():
    """The contract keys (README.md, "The contract keys"), as module options."""
    return dict(
        **typed(table="str", schema="str", id_column="str", status_column="str"),
        relation_kind=dict(type="str", choices=["table", "view"], default="table"),
        **{name: dict(type="list", elements="str") for name in STATUS_LISTS},
        claimed_at_column=dict(type="str"),
        lease=dict(type="dict", options=typed(multiplier="float", expires_at_column="str")),
        clock_skew_s=dict(type="float", default=0.0),
        statement_timeout_ms=dict(type="int", default=5000),
        lock_timeout_ms=dict(type="int", default=2000),
        **typed(timestamp_zone="str", preset="str"),
        kind_timeouts=dict(type="dict", default={}),
        **lookup_spec(),
    )


STATUS_LISTS = ("claimed_statuses", "queued_statuses", "finished_statuses")
TIMEOUT_SOURCES = ["docker", "podman", "systemd", "process", "env_file", "command", "fixed"]


def lookup_spec():
    """Where the host's task timeout and runtime start time are read."""
    return dict(
        task_timeout=dict(
            type="dict",
            options=dict(
                source=dict(type="str", choices=TIMEOUT_SOURCES),
                container=dict(type="str", default="backend"),
                variable=dict(type="str", default="APP_TASK_TIMEOUT_S"),
                **typed(default_s="float", value_s="float", unit="str", pid_file="str"),
                path=dict(type="str"),
                **str_list(command=[]),
                engine=dict(type="str", choices=["docker", "podman"], default="docker"),
            ),
        ),
        runtime=dict(
            type="dict",
            options=dict(
                source=dict(
                    type="str",
                    choices=["docker", "podman", "systemd", "process", "fixed", "none"],
                    default="docker",
                ),
                container=dict(type="str", default="backend"),
                **typed(unit="str", pid_file="str", started_at="str"),
            ),
        ),
    )


def connection_spec():
    """How the controller reaches the host's database. Every member of the action group takes
    these, so that module_defaults for the group sets them once (members that reach no
    database ignore them); user, database and passwords fall back to libpq's variables."""
    return dict(
        dsn=dict(type="str", no_log=True, fallback=(env_fallback, ["LEASEGUARD_DSN"])),
        **typed(db_host="str", db_port="int"),  # no default: a DSN's own are never replaced
        db_name=dict(type="str", fallback=(env_fallback, ["PGDATABASE"])),
        db_user=dict(type="str", fallback=(env_fallback, ["PGUSER"])),
        db_password=dict(
            type="str",
            no_log=True,
            fallback=(env_fallback, ["LEASEGUARD_DB_PASSWORD", "PGPASSWORD"]),
        ),
        tunnel=dict(type="bool", default=True),
        connect_timeout_s=dict(type="int", default=10),
    )


def intake_spec():
    """The intake to hold, and the role that owns its pg_cron jobs (pg_cron shows and lets
    each role alter only its own jobs)."""
    return dict(
        **str_list(pause_cron_jobs=[]),
        cron_database=dict(type="str"),
        cron_user=dict(type="str"),
        cron_password=dict(
            type="str", no_log=True, fallback=(env_fallback, ["LEASEGUARD_CRON_PASSWORD"])
        ),
        **str_list(pause_command=[], resume_command=[]),
        resume_retry_s=dict(type="float", default=60.0),
    )


def flags(*names):
    return {name: dict(type="bool", default=False) for name in names}


def task_timeout_argument_spec():
    return dict(**lookup_spec(), **flags("check_vars"), **connection_spec())


def lease_guard_argument_spec():
    return dict(
        **contract_spec(),
        **connection_spec(),
        **flags("wait"),
        deadline_s=dict(type="float"),
        poll_s=dict(type="float", default=5.0),
        **intake_spec(),
        status_file=dict(type="path"),
        metrics_file=dict(type="path"),
        # Facts already known, so the guard need not ask the host again (or every host's).
        **typed(lookup="dict", task_timeout_s="float", runtime_started_at="str"),
        fleet_lookups=dict(type="dict"),
        **flags("fail_on_defer", "force"),
        held_intake=dict(type="dict"),
        **flags("check_vars", "from_role_vars"),
    )


def cron_budget_argument_spec():
    """`jobs` and `overrides` are validated by the core (leaseguard.core.budgets), which names
    the job and key in every message; the spec only says they are mappings."""
    return dict(
        **typed(jobs="dict", overrides="dict", environment="str"),
        on_drift=dict(type="str", choices=["report", "apply"], default="report"),
        **typed(cron_database="str", active="dict"),
        resume_recorded=dict(type="bool", default=False),
        **connection_spec(),
    )


# How the restart role can restart a runtime (runtime_restart, check_vars' `restart`).
RESTART_METHODS = ("docker", "podman", "systemd", "command")


def runtime_restart_argument_spec():
    return dict(
        **lookup_spec(),
        method=dict(type="str", required=True, choices=list(RESTART_METHODS)),
        **typed(container="str", unit="str"),
        **str_list(command=[]),
        stop_timeout_s=dict(type="int", default=10),
        verify_timeout_s=dict(type="int", default=60),
        lookup=dict(type="dict"),
        **connection_spec(),
    )


def check_vars_argument_spec():
    restart = dict(
        method=dict(type="str", required=True, choices=list(RESTART_METHODS)),
        container=dict(type="str", default=""),
        **str_list(command=[]),
        unit=dict(type="str", default=""),
    )
    return dict(**str_list(allow=[]), restart=dict(type="dict", options=restart))


def intake_hold_argument_spec():
    return dict(
        state=dict(type="str", required=True, choices=["held", "released"]),
        hold=dict(type="dict"),
        action=dict(type="str", default="restart"),
        **intake_spec(),
        quiet_timeout_s=dict(type="float", default=120.0),
        **connection_spec(),
        **flags("from_role_vars"),
    )


def _role_variables(spec, not_variables, drain):
    """Each option the roles' variables fill (from_role_vars), with its variable's name: a
    drain's own timing and files are leaseguard_drain_<option>."""
    return {
        option: f"leaseguard_drain_{option}" if option in drain else f"leaseguard_{option}"
        for option in spec
        if option not in not_variables
    }


def role_variables():
    """lease_guard's; what a caller decides, or this host's facts, are no variables."""
    return _role_variables(
        lease_guard_argument_spec(),
        {"lookup", "task_timeout_s", "runtime_started_at", "wait", "force", "fail_on_defer"}
        | {"check_vars", "from_role_vars", "held_intake"},
        {"deadline_s", "poll_s", "status_file", "metrics_file", "resume_retry_s"},
    )


def intake_hold_role_variables():
    return _role_variables(
        intake_hold_argument_spec(),
        {"state", "hold", "action", "from_role_vars"},
        {"resume_retry_s"},
    )


# Each module's argument spec and validate_argument_spec's other options (its rules), for the
# module file and its action plugin alike.
MODULE_SPECS = {
    "check_vars": lambda: (check_vars_argument_spec(), {}),
    "task_timeout": lambda: (task_timeout_argument_spec(), {}),
    "runtime_restart": lambda: (runtime_restart_argument_spec(), {}),
    "lease_guard": lambda: (
        lease_guard_argument_spec(),
        dict(
            required_together=[("pause_command", "resume_command")],
            # one host's facts or every host's, never both
            mutually_exclusive=[
                ("fleet_lookups", one) for one in ("lookup", "task_timeout_s", "runtime_started_at")
            ],
        ),
    ),
    "cron_budget": lambda: (
        cron_budget_argument_spec(),
        dict(required_one_of=[("jobs", "active", "resume_recorded")]),
    ),
    "intake_hold": lambda: (
        intake_hold_argument_spec(),
        dict(required_together=[("pause_command", "resume_command")]),
    ),
}


def action_only(name):
    """What a docs-only module file runs: the work happens in the action plugin. The spec is
    still built here, so ansible-test's validate-modules checks it against DOCUMENTATION."""
    argument_spec, spec_options = MODULE_SPECS[name]()
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **spec_options)
    module.fail_json(msg=f"leaseguard.deploy.{name} runs as an action plugin on the controller")
