"""Fabric's own config reaches leaseguard's connections: connect_kwargs, the connect
budget (`fab -t`, `timeouts.connect`), ssh_config ProxyJump in OpenSSH's order, and every
`leaseguard:` key reachable by a `FABRIC_LEASEGUARD_*` variable.

The same against a real sshd: tests/integration/test_fabric_config.py.
"""

from __future__ import annotations

import pytest
from fabric import Config
from invoke.context import Context
from paramiko import SSHConfig

from leaseguard.core.errors import ConfigError
from leaseguard.fabric.tasks import (
    DRAIN_KEYS,
    collection,
    connection_to,
    settings_from_config,
)
from leaseguard.orchestration.drain_run import DrainOptions


def config_with(ssh_config: str = "", **data):
    config = Config(ssh_config=SSHConfig.from_text(ssh_config), overrides=data)
    config.load_collection(collection().configuration())  # the fabfile's own defaults
    return config


def test_the_drain_keys_named_for_the_environment_are_drain_options_fields():
    assert frozenset(DrainOptions.__dataclass_fields__) == DRAIN_KEYS


def test_every_key_unset_reads_as_the_defaults_even_under_a_preset():
    plain = settings_from_config(config_with())
    assert plain.contract.table == "execution_runs"
    river = settings_from_config(config_with(leaseguard={"preset": "river"}))
    assert river.contract.table == "river_job"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, 10),
        ({"timeouts": {"connect": 4}}, 4),
        ({"timeouts": {"connect": "4"}}, 4),  # FABRIC_TIMEOUTS_CONNECT=4
        ({"timeouts": {"connect": 4}, "leaseguard": {"connect_timeout_s": 6}}, 6),
        ({"connect_kwargs": {"timeout": 3}, "leaseguard": {"connect_timeout_s": 6}}, 3),
    ],
    ids=["default", "timeouts.connect", "env-string", "leaseguard-key-wins", "fab-t-wins"],
)
def test_the_connect_budget_is_fab_t_then_leaseguard_then_timeouts_connect(data, expected):
    settings = settings_from_config(config_with(**data))
    assert settings.contract.connect_timeout_s == expected
    assert settings.ssh.connect_timeout_s == expected


def test_a_connect_budget_that_is_not_a_number_names_where_it_came_from():
    with pytest.raises(ConfigError, match=r"timeouts\.connect must be a whole number"):
        settings_from_config(config_with(timeouts={"connect": "soon"}))


@pytest.mark.parametrize(("text", "accepted"), [("true", True), ("false", False)])
def test_a_flag_from_the_environment_reads_true_and_false(text, accepted):
    config = config_with(leaseguard={"connection": {"accept_unknown_host_keys": text}})
    assert settings_from_config(config).ssh.accept_unknown_host_keys is accepted


def test_connect_kwargs_reach_the_host_and_every_jump_host_without_fab_t():
    data = {"password": "pw", "allow_agent": False, "timeout": 3}
    c = Context(config=config_with(connect_kwargs=data))
    settings = settings_from_config(c.config)
    gateway = {"leaseguard": {"connection": {"gateway": "jump1,jump2"}}}
    c_gw = Context(config=config_with(connect_kwargs=data, **gateway))
    connection = connection_to("app1", c_gw, settings_from_config(c_gw.config))
    for each in (connection_to("app1", c, settings), connection, connection.gateway):
        assert each.connect_kwargs["password"] == "pw"
        assert each.connect_kwargs["allow_agent"] is False
        assert "timeout" not in each.connect_kwargs  # it is the connect_timeout: 3
        assert each.connect_timeout == 3


SSH_CONFIG = """
Host app1
    HostName 10.0.0.11
    ProxyJump jump1,deploy@jump2:2222
Host jump1
    HostName 192.0.2.1
Host lonely
    ProxyJump lonely
"""


def test_ssh_config_proxyjump_is_walked_from_its_first_hop():
    c = Context(config=config_with(SSH_CONFIG))
    connection = connection_to("app1", c, settings_from_config(c.config))
    second = connection.gateway
    first = second.gateway
    assert (second.host, second.user, second.port) == ("jump2", "deploy", 2222)
    assert (first.host, first.gateway) == ("192.0.2.1", None)  # jump1, by its HostName
    assert second.connect_timeout == first.connect_timeout == 10


def test_a_proxyjump_to_itself_is_no_gateway_as_fabric_reads_it():
    c = Context(config=config_with(SSH_CONFIG))
    assert connection_to("lonely", c, settings_from_config(c.config)).gateway is None


def test_the_connection_sections_gateway_wins_over_ssh_config():
    leaseguard = {"connection": {"gateway": "bastion"}}
    c = Context(config=config_with(SSH_CONFIG, leaseguard=leaseguard))
    connection = connection_to("app1", c, settings_from_config(c.config))
    assert (connection.gateway.host, connection.gateway.gateway) == ("bastion", None)
