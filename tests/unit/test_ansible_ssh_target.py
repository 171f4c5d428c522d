"""The tunnel is opened with the host's own Ansible connection settings."""

import importlib
import sys
from types import SimpleNamespace

import pytest

from leaseguard.core.errors import ConfigError
from tests.support.ansible_run import REPO

sys.path.insert(0, str(REPO / "build" / "collections"))  # the link `make collection-link` makes
front = importlib.import_module(
    "ansible_collections.leaseguard.deploy.plugins.plugin_utils._action"
)


class FakeConnection:
    """An ssh connection plugin as the action plugin sees it: options by name."""

    transport = "ansible.builtin.ssh"

    def __init__(self, **options):
        self.options = {"host_key_checking": True, "timeout": 10, **options}

    def get_option(self, name):
        if name not in self.options:
            raise KeyError(name)
        return self.options[name]


PLAY = SimpleNamespace(remote_addr="10.0.0.9")


def target(**options):
    return front.ssh_target(FakeConnection(**options), PLAY)


def test_inventory_host_port_user_and_key_are_used():
    host, options = target(
        host="app1.internal", port=2222, remote_user="deploy", private_key_file="/k/id"
    )
    assert host == "app1.internal"
    assert (options.port, options.user, options.key_filename) == (2222, "deploy", "/k/id")
    assert options.accept_unknown_host_keys is False


def test_the_play_context_address_is_the_fallback_host():
    assert target()[0] == "10.0.0.9"


def test_jump_host_and_known_hosts_come_from_the_ssh_args():
    _, options = target(
        ssh_common_args="-o ProxyJump=ops@bastion:2200 -o UserKnownHostsFile=/k/known",
        ssh_extra_args="-o StrictHostKeyChecking=yes",
    )
    assert options.gateway == "ops@bastion:2200"
    assert options.known_hosts == "/k/known"
    assert options.accept_unknown_host_keys is False


@pytest.mark.parametrize(
    ("settings", "accepts"),
    [
        ({"host_key_checking": False}, True),
        ({"ssh_common_args": "-o StrictHostKeyChecking=no"}, True),
        ({"ssh_common_args": "-o StrictHostKeyChecking=accept-new"}, True),
        ({"ssh_common_args": "-o StrictHostKeyChecking=yes"}, False),
        ({}, False),
    ],
)
def test_unknown_host_keys_are_accepted_only_when_ansible_would(settings, accepts):
    assert target(**settings)[1].accept_unknown_host_keys is accepts


def test_proxycommand_is_refused_rather_than_bypassed():
    with pytest.raises(ConfigError, match="ProxyJump"):
        target(ssh_common_args="-o ProxyCommand='nc %h %p'")
