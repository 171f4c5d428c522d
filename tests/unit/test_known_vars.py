"""check_vars' checks as pure functions: the variable names, and the restart's own settings."""

import importlib
import sys

import pytest
import yaml

from tests.support.ansible_run import REPO

sys.path.insert(0, str(REPO / "build" / "collections"))  # the link `make collection-link` makes
known_vars = importlib.import_module(
    "ansible_collections.leaseguard.deploy.plugins.plugin_utils._action"
)
check_vars = importlib.import_module(
    "ansible_collections.leaseguard.deploy.plugins.action.check_vars"
)


def test_known_names_pass_and_other_variables_are_not_looked_at():
    result = known_vars.checked_variables(
        {"leaseguard_on_busy": "wait", "leaseguard_lookup": {}, "ansible_host": "x", "app": 1}
    )
    assert result == {"changed": False, "checked": ["leaseguard_lookup", "leaseguard_on_busy"]}


def test_an_unknown_name_fails_naming_the_nearest_known_one_or_none():
    result = known_vars.checked_variables(
        {"leaseguard_on_bussy": "wait", "leaseguard_qqqqqqqqqqqq": 1}
    )
    assert result["failed"] is True
    assert result["unknown"] == {
        "leaseguard_on_bussy": "leaseguard_on_busy",
        "leaseguard_qqqqqqqqqqqq": None,
    }
    assert "leaseguard_qqqqqqqqqqqq (no known name is close)" in result["msg"]


def test_allow_accepts_a_name_of_the_users_own():
    assert "failed" not in known_vars.checked_variables(
        {"leaseguard_release": 1}, ["leaseguard_release"]
    )


def restart_of(method, container="", command=(), unit=""):
    return {"method": method, "container": container, "command": list(command), "unit": unit}


@pytest.mark.parametrize(
    ("restart", "missing"),
    [
        (restart_of("command"), "leaseguard_restart_command"),
        (restart_of("systemd"), "leaseguard_restart_unit"),
        (restart_of("command", command=["true"]), None),
        (restart_of("systemd", unit="worker.service"), None),
        (restart_of("docker", container="backend"), None),
        (restart_of("podman", container="backend"), None),
        # An empty container restarts nothing either.
        (restart_of("docker"), "leaseguard_restart_container"),
    ],
)
def test_a_restart_method_without_what_it_runs_is_named(restart, missing):
    said = check_vars.restart_missing(restart)
    if missing is None:
        assert said is None
    else:
        assert said == f"leaseguard: restart method {restart['method']} needs {missing}"


specs = importlib.import_module("ansible_collections.leaseguard.deploy.plugins.module_utils._specs")


def guard_role_variables():
    path = REPO / "roles" / "guard" / "meta" / "argument_specs.yml"
    return set(yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"])


def test_every_option_from_role_vars_is_a_documented_guard_role_variable():
    mapped = specs.role_variables("lease_guard")
    holding = set(specs.role_variables("intake_hold").values())
    assert set(mapped.values()) | holding <= guard_role_variables()
    # and every guard role variable but the caller's decision fills an option
    assert guard_role_variables() - set(mapped.values()) - holding == {"leaseguard_on_busy"}
    assert mapped["deadline_s"] == "leaseguard_drain_deadline_s"
    assert "lookup" not in mapped and "wait" not in mapped and "force" not in mapped


def test_what_each_task_decides_is_never_filled_from_a_role_variable(tmp_path, monkeypatch):
    """Even a guard role declaring leaseguard_force (or fail_on_defer, each_host...) does not
    make every from_role_vars guard forced: those stay the calling task's own decision."""
    per_task = ["wait", "force", "fail_on_defer", "each_host", "held_intake", "lookup", "state"]
    declared = guard_role_variables() | {f"leaseguard_{option}" for option in per_task}
    specs_file = tmp_path / "roles" / "guard" / "meta" / "argument_specs.yml"
    specs_file.parent.mkdir(parents=True)
    options = {name: {"type": "raw"} for name in declared}
    specs_file.write_text(yaml.safe_dump({"argument_specs": {"main": {"options": options}}}))
    (tmp_path / "plugins").symlink_to(REPO / "plugins")
    monkeypatch.setattr(specs, "PLUGINS", str(tmp_path / "plugins"))
    mapped = {**specs.role_variables("lease_guard"), **specs.role_variables("intake_hold")}
    assert mapped["deadline_s"] == "leaseguard_drain_deadline_s"  # the file was read
    assert not set(per_task) & set(mapped), mapped


def test_a_restart_named_by_a_replica_filter_is_named_with_what_to_do():
    said = check_vars.restart_missing(restart_of("docker", container="label=svc=worker"))
    assert said.startswith("leaseguard: restart method docker needs leaseguard_restart_container")
    assert "a filter or a glob names replicas, not what to restart" in said


def test_every_secret_role_variable_and_module_option_is_no_log():
    """A password or DSN is never logged: every role's argument spec says so (ansible-doc -t
    role shows it), and every module's spec that takes one."""
    for path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            for name, option in (entry.get("options") or {}).items():
                if "password" in name or name.endswith("_dsn"):
                    assert option.get("no_log") is True, f"{path.parent.parent.name}: {name}"
    for module in ("lease_guard", "intake_hold", "cron_budget", "task_timeout", "runtime_restart"):
        spec = specs.module_spec(module)[0]
        for name, option in spec.items():
            if "password" in name or name == "dsn":
                assert option.get("no_log") is True, f"{module}: {name}"
