# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the argument specs its modules and action plugins share.

Not a public API. The core package (`leaseguard.core.contract`, the drain options) owns every
default, so the CLI, Fabric and Ansible never disagree. The defaults written here repeat the
core's so that `ansible-doc` shows them (this file must import without the core, for
ansible-test); tests/unit/test_doc_defaults.py fails when one differs from the core's or
from DOCUMENTATION. A key a preset can set, or whose effective default depends on other keys
(db_host/db_port: one DSN means one database), has none: "not given" must stay "not given".
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule, env_fallback


def typed(**types):
    """Options that have a type and nothing else (no default, choices or fallback)."""
    return {name: dict(type=kind) for name, kind in types.items()}


def str_lists(*names):
    return {name: dict(type="list", elements="str") for name in names}


def contract_spec():
    """The contract keys (README.md, "The contract keys"), as module options."""
    return dict(
        **typed(table="str", schema="str", id_column="str", status_column="str"),
        relation_kind=dict(type="str", choices=["table", "view"], default="table"),
        **str_lists("claimed_statuses", "queued_statuses", "finished_statuses"),
        claimed_at_column=dict(type="str"),
        lease=dict(type="dict", options=lease_spec()),
        clock_skew_s=dict(type="float", default=0.0),
        statement_timeout_ms=dict(type="int", default=5000),
        lock_timeout_ms=dict(type="int", default=2000),
        timestamp_zone=dict(type="str"),
        preset=dict(type="str"),
        kind_timeouts=dict(type="dict", default={}),
        **lookup_spec(),
    )


def lease_spec():
    return typed(multiplier="float", expires_at_column="str")


def lookup_spec():
    """Where the host's task timeout and runtime start time are read."""
    return dict(
        task_timeout=dict(
            type="dict",
            options=dict(
                source=dict(
                    type="str",
                    choices=[
                        "docker",
                        "podman",
                        "systemd",
                        "process",
                        "env_file",
                        "command",
                        "fixed",
                    ],
                ),
                container=dict(type="str", default="backend"),
                variable=dict(type="str", default="APP_TASK_TIMEOUT_S"),
                default_s=dict(type="float"),
                value_s=dict(type="float"),
                unit=dict(type="str"),
                pid_file=dict(type="str"),
                path=dict(type="str"),
                command=dict(type="list", elements="str", default=[]),
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
                unit=dict(type="str"),
                pid_file=dict(type="str"),
                started_at=dict(type="str"),
            ),
        ),
    )


def connection_spec():
    """How the controller reaches the host's database: through the host, or directly.

    Every member of the action group (meta/runtime.yml) takes these options, so that
    `module_defaults: {group/leaseguard.deploy.leaseguard: ...}` sets them once for all (the
    members that reach no database accept and ignore them). Secrets are marked no_log here,
    once; user, database and password fall back to the controller's libpq variables so they
    need not be written into inventories.
    """
    return dict(
        dsn=dict(type="str", no_log=True, fallback=(env_fallback, ["LEASEGUARD_DSN"])),
        # No defaults: "not given" must be told apart from 127.0.0.1:5432, so that a DSN's
        # own host and port are never replaced (leaseguard.core.dsn resolves the address).
        db_host=dict(type="str"),
        db_port=dict(type="int"),
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


def drain_spec():
    """Waiting for live leases to end, with intake paused, as `fab drain` does."""
    return dict(
        wait=dict(type="bool", default=False),
        deadline_s=dict(type="float"),
        poll_s=dict(type="float", default=5.0),
        pause_cron_jobs=dict(type="list", elements="str", default=[]),
        cron_database=dict(type="str"),
        **intake_identity_spec(),
        pause_command=dict(type="list", elements="str", default=[]),
        resume_command=dict(type="list", elements="str", default=[]),
        status_file=dict(type="path"),
        metrics_file=dict(type="path"),
        resume_retry_s=dict(type="float", default=60.0),
    )


def facts_spec():
    """Facts already known, so the guard need not ask the host again (or every host's)."""
    return typed(
        lookup="dict", task_timeout_s="float", runtime_started_at="str", fleet_lookups="dict"
    )


def task_timeout_argument_spec():
    return dict(**lookup_spec(), **check_vars_option(), **connection_spec())


def check_vars_option():
    """Run check_vars' name check first, in the same task (the guard role's tasks do)."""
    return dict(check_vars=dict(type="bool", default=False))


def lease_guard_argument_spec():
    return dict(
        **contract_spec(),
        **connection_spec(),
        **drain_spec(),
        **facts_spec(),
        fail_on_defer=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        held_intake=dict(type="dict"),
        each_host=dict(type="bool", default=False),
        held_intakes=dict(type="dict"),
        **check_vars_option(),
        from_role_vars=dict(type="bool", default=False),
    )


# lease_guard options a caller decides (or facts it passes) rather than configuration: the
# guard role's variables never fill them (from_role_vars).
NOT_ROLE_VARIABLES = frozenset(
    {"lookup", "task_timeout_s", "runtime_started_at"}  # this host's facts
    | {"wait", "force", "fail_on_defer", "check_vars", "from_role_vars", "held_intake"}
    | {"each_host", "held_intakes"}
)
# A drain's own timing and files are leaseguard_drain_<option> in the roles.
DRAIN_ROLE_VARIABLES = frozenset(
    ("deadline_s", "poll_s", "status_file", "metrics_file", "resume_retry_s")
)


def role_variables():
    """Each lease_guard option the guard role's variables fill, with its variable's name."""
    return {
        option: f"leaseguard_drain_{option}"
        if option in DRAIN_ROLE_VARIABLES
        else f"leaseguard_{option}"
        for option in lease_guard_argument_spec()
        if option not in NOT_ROLE_VARIABLES
    }


def lease_guard_spec_options():
    """The option rules of lease_guard: one host's facts or every host's, never both."""
    return dict(
        required_together=[("pause_command", "resume_command")],
        mutually_exclusive=[
            ("fleet_lookups", one_host)
            for one_host in ("lookup", "task_timeout_s", "runtime_started_at")
        ],
    )


def cron_budget_argument_spec():
    """pg_cron jobs' statement budgets (and active flags), declared for one environment.

    `jobs` and `overrides` are validated by the core (`leaseguard.core.budgets`), which names the
    job and key in every message; the spec only says they are mappings.
    """
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
    """What to restart, its stop budget, and the lookup to check the restart against."""
    return dict(
        **lookup_spec(),
        method=dict(type="str", required=True, choices=list(RESTART_METHODS)),
        **typed(container="str", unit="str"),
        command=dict(type="list", elements="str", default=[]),
        stop_timeout_s=dict(type="int", default=10),
        verify_timeout_s=dict(type="int", default=60),
        lookup=dict(type="dict"),
        **connection_spec(),
    )


def check_vars_argument_spec():
    return dict(
        allow=dict(type="list", elements="str", default=[]),
        restart=dict(
            type="dict",
            options=dict(
                method=dict(type="str", required=True, choices=list(RESTART_METHODS)),
                container=dict(type="str", default=""),
                command=dict(type="list", elements="str", default=[]),
                unit=dict(type="str", default=""),
            ),
        ),
    )


def intake_identity_spec():
    """The role that owns the intake pg_cron jobs, when it is not the guard's (read-only) one.

    pg_cron shows and lets each role alter only its own jobs, so pausing, recording, resuming
    and finding leftover holds run as the jobs' owner.
    """
    return dict(
        cron_user=dict(type="str"),
        cron_password=dict(
            type="str", no_log=True, fallback=(env_fallback, ["LEASEGUARD_CRON_PASSWORD"])
        ),
    )


def intake_hold_argument_spec():
    """Hold intake (pg_cron jobs, a host command) for an action, and let go of that hold."""
    return dict(
        state=dict(type="str", required=True, choices=["held", "released"]),
        hold=dict(type="dict"),
        action=dict(type="str", default="restart"),
        pause_cron_jobs=dict(type="list", elements="str", default=[]),
        cron_database=dict(type="str"),
        pause_command=dict(type="list", elements="str", default=[]),
        resume_command=dict(type="list", elements="str", default=[]),
        resume_retry_s=dict(type="float", default=60.0),
        quiet_timeout_s=dict(type="float", default=120.0),
        **intake_identity_spec(),
        **connection_spec(),
        from_role_vars=dict(type="bool", default=False),
    )


def intake_hold_role_variables():
    """Each intake_hold option the roles' variables fill (from_role_vars)."""
    drain = {"resume_retry_s"}
    return {
        option: f"leaseguard_drain_{option}" if option in drain else f"leaseguard_{option}"
        for option in intake_hold_argument_spec()
        if option not in {"state", "hold", "action", "from_role_vars"}
    }


def cron_budget_spec_options():
    return dict(required_one_of=[("jobs", "active", "resume_recorded")])


# Each module's argument spec and validate_argument_spec's other options (its rules), for the
# module file and its action plugin alike.
MODULE_SPECS = {
    "check_vars": lambda: (check_vars_argument_spec(), {}),
    "task_timeout": lambda: (task_timeout_argument_spec(), {}),
    "runtime_restart": lambda: (runtime_restart_argument_spec(), {}),
    "lease_guard": lambda: (lease_guard_argument_spec(), lease_guard_spec_options()),
    "cron_budget": lambda: (cron_budget_argument_spec(), cron_budget_spec_options()),
    "intake_hold": lambda: (
        intake_hold_argument_spec(),
        dict(required_together=[("pause_command", "resume_command")]),
    ),
}


def action_only(name):
    """What a docs-only module file runs: the work happens in the action plugin.

    The argument spec is still built here, so ansible-test's validate-modules checks it
    against DOCUMENTATION.
    """
    argument_spec, spec_options = MODULE_SPECS[name]()
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, **spec_options)
    module.fail_json(msg=f"leaseguard.deploy.{name} runs as an action plugin on the controller")
