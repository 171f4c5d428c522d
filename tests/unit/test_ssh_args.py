"""parse_openssh_args: the tunnel honours the jump host and known_hosts Ansible's ssh uses."""

import pytest

from leaseguard.core.config_values import parse_openssh_args, reject_hostaddr
from leaseguard.core.errors import ConfigError

VALID_CASES = [
    ("", {}),
    (
        "-C -o ControlMaster=auto -o ControlPersist=60s",
        {"controlmaster": "auto", "controlpersist": "60s"},
    ),
    ("-o UserKnownHostsFile=/k/known_hosts", {"userknownhostsfile": "/k/known_hosts"}),
    ("-oStrictHostKeyChecking=no", {"stricthostkeychecking": "no"}),
    ("-o 'ProxyJump jump@bastion:2222'", {"proxyjump": "jump@bastion:2222"}),
    ("-J ops@bastion", {"proxyjump": "ops@bastion"}),
    (
        "-i /keys/id -p 2200 -l deploy",
        {"identityfile": "/keys/id", "port": "2200", "user": "deploy"},
    ),
    ("-o ProxyJump=a -o ProxyJump=b", {"proxyjump": "a"}),  # like ssh: the first one wins
    ("-v -4 -o IdentitiesOnly=yes", {"identitiesonly": "yes"}),  # flags without values skipped
    ("-o proxycommand='nc %h %p'", {"proxycommand": "nc %h %p"}),
]


@pytest.mark.parametrize(("text", "expected"), VALID_CASES)
def test_options_are_read_like_ssh_reads_them(text, expected):
    assert parse_openssh_args(text) == expected


def test_unbalanced_quotes_are_a_config_error_without_echoing_the_arguments():
    with pytest.raises(ConfigError) as caught:
        parse_openssh_args("-o 'ProxyJump=secret")
    assert "secret" not in str(caught.value)


def test_a_hostaddr_in_the_dsn_is_refused_since_libpq_would_prefer_it_to_the_tunnel():
    reject_hostaddr("dbname=app user=guard host=db.internal")
    with pytest.raises(ConfigError, match="not hostaddr"):
        reject_hostaddr("dbname=app hostaddr=10.0.0.5 password=secret")


def test_a_proxyjump_chain_reaches_the_hops_in_order():
    """-J a,b: like ssh, a is reached first, b through a, the host through b."""
    from leaseguard.adapters.ssh import SshOptions, make_connection

    target = make_connection("app1", SshOptions(gateway="ops@bastion:2222, deploy@inner"))
    inner = target.gateway
    assert (inner.host, inner.user) == ("inner", "deploy")
    bastion = inner.gateway
    assert (bastion.host, bastion.user, bastion.port) == ("bastion", "ops", 2222)
    assert bastion.gateway is None
