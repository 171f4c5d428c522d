"""One config file for the whole product: the contract keys and a `cron_budgets` section.

`leaseguard budgets` reads the section; `leaseguard check` and the Fabric tasks skip it, and
still reject any other unknown key.
"""

import pytest
import yaml

from leaseguard.cli.main import build_parser, contract_from_args
from leaseguard.core.budgets.config import load_budget_config
from leaseguard.core.errors import ConfigError
from leaseguard.fabric.tasks import settings_from_config

CRON_BUDGETS = {
    "jobs": {
        "publish": {
            "schedule": "* * * * *",
            "function": "public.publish_stats_projection_job_v1",
            "budget": "3s",
        }
    },
    "overrides": {"production": {"publish": "6s"}},
}


def write(tmp_path, data):
    path = tmp_path / "leaseguard.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def check_contract(path):
    return contract_from_args(build_parser().parse_args(["check", "--config", str(path)]))


@pytest.mark.parametrize("nested", [False, True], ids=["top_level", "under_leaseguard"])
def test_check_reads_the_contract_from_a_file_that_also_declares_cron_budgets(tmp_path, nested):
    section = {"table": "runs", "claimed_statuses": ["claimed"], "cron_budgets": CRON_BUDGETS}
    path = write(tmp_path, {"leaseguard": section} if nested else section)
    contract = check_contract(path)
    assert contract.table == "runs"
    assert list(contract.claimed_statuses) == ["claimed"]
    assert load_budget_config(path).declare("production").jobs[0].budget_ms == 6000


def test_check_still_rejects_other_unknown_keys_in_the_file(tmp_path):
    path = write(tmp_path, {"table": "runs", "cron_budget": CRON_BUDGETS})
    with pytest.raises(ConfigError, match="cron_budget"):
        check_contract(path)


def test_fabric_settings_skip_the_cron_budgets_section():
    settings = settings_from_config(
        {"leaseguard": {"table": "runs", "cron_budgets": CRON_BUDGETS, "connection": {}}}
    )
    assert settings.contract.table == "runs"


def test_fabric_settings_still_reject_other_unknown_keys():
    with pytest.raises(ConfigError, match="cron_budget"):
        settings_from_config({"leaseguard": {"table": "runs", "cron_budget": CRON_BUDGETS}})


@pytest.mark.parametrize(
    ("connection", "message"),
    [
        ({"db_port": "five"}, "connection.db_port must be a whole number"),
        ({"db_port": 70000}, r"connection.db_port must be a port number \(1-65535\)"),
        ({"db_port": True}, "connection.db_port must be a whole number"),
        ({"accept_unknown_host_keys": "yes"}, "connection.accept_unknown_host_keys must be"),
        ({"known_hosts": ["a", "b"]}, "connection.known_hosts must be a non-empty string"),
        ({"gateway": 22}, "connection.gateway must be a non-empty string"),
        ({"dsn": {"host": "db"}}, "connection.dsn must be a non-empty string"),
        ({"db_porrt": 5432}, r"unknown config key\(s\): connection.db_porrt"),
        ("db.internal:5432", "connection must be a mapping"),
    ],
)
def test_fabric_connection_section_names_the_bad_value(connection, message):
    with pytest.raises(ConfigError, match=message):
        settings_from_config({"leaseguard": {"table": "runs", "connection": connection}})


def test_fabric_connection_section_reads_good_values():
    connection = {
        "dsn": "postgresql://app@/app",
        "db_host": "10.0.0.5",
        "db_port": "6432",
        "known_hosts": "/etc/ssh/ssh_known_hosts",
        "accept_unknown_host_keys": True,
        "gateway": "bastion",
    }
    settings = settings_from_config({"leaseguard": {"connection": connection}})
    assert (settings.address.host, settings.address.port) == ("10.0.0.5", 6432)
    assert settings.ssh.accept_unknown_host_keys is True
    assert (settings.ssh.known_hosts, settings.ssh.gateway) == (
        "/etc/ssh/ssh_known_hosts",
        "bastion",
    )


@pytest.mark.parametrize(
    "leaseguard",
    [
        {"table": "runs", "cron_budget": CRON_BUDGETS},
        {"connection": {"db_porrt": 5432}},
        {"connection": {"known_hosts": ["a", "b"]}},
    ],
)
def test_what_a_host_needs_is_refused_before_any_host_starts(leaseguard):
    with pytest.raises(ConfigError):
        settings_from_config({"leaseguard": leaseguard})


@pytest.mark.parametrize(
    ("leaseguard", "message"),
    [
        ({"connection": {"dsn": "host=/run/postgresql dbname=app"}}, "socket directory"),
        ({"connection": {"dsn": "dbname=app port=5432", "db_port": 5433}}, "two databases"),
        ({"drain": {"poll_s": 0}}, "poll_s"),
    ],
)
def test_the_dsn_and_the_drain_section_are_refused_naming_the_key(leaseguard, message):
    settings = settings_from_config({"leaseguard": leaseguard})  # parsed once the hosts start
    with pytest.raises(ConfigError, match=message):
        settings.parsed()
