# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: how an action reaches its host (the task's own connection)
and the host's database (a tunnel with the host's inventory SSH settings, or directly)."""

from __future__ import annotations

import dataclasses
import secrets
import shlex
from contextlib import contextmanager, nullcontext

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import ConfigError, api

try:
    from psycopg import ProgrammingError
    from psycopg.conninfo import make_conninfo
except ImportError:  # require_leaseguard() fails every task first, naming the install
    pass

# OpenSSH's (and paramiko's) words for a refused host key, and what to do; the raw text is
# never repeated (it may quote the command).
_REPLACE_KEY = (
    "if the change is expected, verify the new key and replace the old one "
    "(ssh-keygen -R {host}, then ssh-keyscan)"
)
_HOST_KEY_CAUSES = {
    "remote host identification has changed": "host key does not match known_hosts (it "
    "changed since it was recorded): " + _REPLACE_KEY,
    "host key mismatch": "host key does not match known_hosts: " + _REPLACE_KEY,
    "host key verification failed": "host key verification failed (not in known_hosts, or "
    "not matching it): add the verified key to known_hosts (ssh-keyscan)",
}


class AnsibleRunner:
    """Runs commands on the host through the task's own connection (become, jump hosts)."""

    def __init__(self, action, label):
        self._action = action
        self.label = label

    @property
    def becomes(self):
        return getattr(self._action._connection, "become", None) is not None

    def run(self, argv):
        # sudoable only with become: it also makes ansible's ssh allocate a tty, which
        # merges stderr into stdout and ends lines with CRLF; tty_argv keeps them apart.
        nonce = secrets.token_hex(8) if self.becomes else None
        command = api.tty_argv(tuple(argv), nonce) if nonce else argv
        try:
            result = self._action._low_level_execute_command(
                shlex.join(command), sudoable=nonce is not None
            )
        except (AnsibleConnectionFailure, AnsibleError) as exc:
            text = str(exc).lower()
            causes = (cause for needle, cause in _HOST_KEY_CAUSES.items() if needle in text)
            cause = next(causes, "running a lookup failed").format(host=self.label)
            raise api.TunnelError(f"host {self.label}: {cause} ({type(exc).__name__})") from None
        ran = api.CommandResult(
            int(result.get("rc", 1)), result.get("stdout", ""), result.get("stderr", "")
        )
        return api.split_tty(ran, nonce) if nonce else ran


def conninfo_from(args):
    """dbname/user/password and the other libpq keywords of `dsn` as one conninfo."""
    given = {"dbname": args["db_name"], "user": args["db_user"], "password": args["db_password"]}
    try:
        conninfo = make_conninfo(args["dsn"] or "", **{k: v for k, v in given.items() if v})
    except ProgrammingError:
        raise api.invalid_dsn(args["dsn"] or "") from None
    api.reject_hostaddr(conninfo)
    return conninfo


def ssh_target(connection, play_context):
    """Host and SSH options for the tunnel, from the host's own Ansible connection settings."""

    def option(name):
        try:
            return connection.get_option(name)
        except KeyError:
            return None

    ssh_args = " ".join(
        str(option(name) or "") for name in ("ssh_common_args", "ssh_extra_args", "ssh_args")
    )
    parsed = api.parse_openssh_args(ssh_args)
    if "proxycommand" in parsed:
        raise ConfigError(
            "ProxyCommand in the host's ssh arguments cannot carry the database tunnel; "
            "use ProxyJump (-J) instead"
        )
    strict = parsed.get("stricthostkeychecking", "").lower()
    port = option("port") or parsed.get("port")
    options = api.SshOptions(
        user=option("remote_user") or parsed.get("user"),
        port=int(port) if port else None,
        key_filename=option("private_key_file") or parsed.get("identityfile"),
        known_hosts=parsed.get("userknownhostsfile"),
        # Only the host's own Ansible settings opt out of refusing unknown keys, as for
        # ansible's ssh itself; a changed key is refused either way.
        accept_unknown_host_keys=option("host_key_checking") is False
        or strict in ("no", "off", "accept-new"),
        gateway=parsed.get("proxyjump"),
        connect_timeout_s=int(option("timeout") or 10),
    )
    return str(option("host") or play_context.remote_addr), options


def tunnels(action, args):
    """Whether the database is reached through a tunnel: not with `tunnel: false` or a
    `local` connection (then the DSN's own host and port, as the CLI uses them)."""
    transport = str(getattr(action._connection, "transport", "") or "").rsplit(".", 1)[-1]
    return bool(args["tunnel"]) and transport != "local"


@contextmanager
def database_path(action, args, *, probe=True):
    """(conninfo, tunnel or None) as the controller reaches the database, closed on exit.
    Without `probe` the caller's own connection tries the address, naming the tunnel's failure."""
    conninfo = conninfo_from(args)
    if not tunnels(action, args):
        path = nullcontext((api.direct_conninfo(conninfo, args["db_host"], args["db_port"]), None))
    else:
        address = api.DatabaseAddress(
            *api.tunnel_far_end(conninfo, args["db_host"], args["db_port"])
        )
        host, options = ssh_target(action._connection, action._play_context)
        if args.get("connect_timeout_s"):
            # The SSH connect fits in a poll's budget, so a drain can reopen it within one poll.
            timeout = min(options.connect_timeout_s, int(args["connect_timeout_s"]))
            options = dataclasses.replace(options, connect_timeout_s=timeout)
        path = api.tunnelled(api.make_connection(host, options), conninfo, address, probe=probe)
    with path as opened:
        yield opened


@contextmanager
def database_conninfo(action, args):
    with database_path(action, args) as (conninfo, _tunnel):
        yield conninfo
