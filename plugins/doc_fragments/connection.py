# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # How the controller reaches a host's database. The SSH side is the host's own inventory
    # connection settings; only the database side is configured here. Every member of the
    # action group (meta/runtime.yml) takes these options (module_utils/_specs.py's
    # connection_spec), so module_defaults for the group can set them once.
    DOCUMENTATION = r"""
options:
  dsn:
    description:
      - A libpq connection string for any further keywords (C(sslmode), C(options), ...).
      - Its host and port, when given, name the database; they are never silently replaced.
        Without a tunnel they are used as given. Through the tunnel they are the tunnel's
        far end (as the host sees it) unless O(db_host)/O(db_port) give it; a different
        O(db_host) or O(db_port) beside them is a usage error naming both options.
      - Never logged or returned.
      - If not set, the E(LEASEGUARD_DSN) environment variable on the controller is used.
    type: str
  db_host:
    description:
      - The database address as seen from the host (with O(tunnel=true)) or from the
        controller (with O(tunnel=false)).
      - If not set, the host in O(dsn); through the tunnel, else V(127.0.0.1); without it,
        else libpq's default (E(PGHOST) or the local socket), as for the CLI.
    type: str
  db_port:
    description:
      - The database port at O(db_host).
      - If not set, the port in O(dsn), else V(5432) (libpq's default, E(PGPORT), without a
        tunnel).
    type: int
  db_name:
    description:
      - The database holding the work table.
      - If not set, the E(PGDATABASE) environment variable on the controller is used.
    type: str
  db_user:
    description:
      - The role the guard logs in as; a read-only role is enough (see the README).
      - If not set, the E(PGUSER) environment variable on the controller is used.
    type: str
  db_password:
    description:
      - The password of O(db_user). Never logged or returned.
      - If not set, E(LEASEGUARD_DB_PASSWORD), then E(PGPASSWORD), on the controller is used;
        libpq's C(.pgpass) also works.
    type: str
  tunnel:
    description:
      - Reach the database through an SSH tunnel to the host, opened with the host's own
        inventory connection settings (C(ansible_host), C(ansible_port), C(ansible_user),
        C(ansible_ssh_private_key_file), C(ProxyJump) and C(UserKnownHostsFile) in the ssh
        arguments, C(host_key_checking)). Host keys are verified against known_hosts and an
        unknown key is refused, unless the host's own Ansible settings opt out
        (C(host_key_checking=false), or C(StrictHostKeyChecking=no) or C(accept-new) in its ssh
        arguments); a key that differs from known_hosts is always refused.
      - V(false) connects from the controller to the database directly (the host and port of
        O(dsn), or O(db_host)/O(db_port)); so does a C(local) connection.
    type: bool
    default: true
  connect_timeout_s:
    description: Seconds to wait for the database connection.
    type: int
    default: 10
"""

    # The group's members that reach no database: they take the shared options only so that
    # the group's module_defaults apply to them too.
    UNUSED = r"""
options: {}
notes:
  - The database connection options (O(dsn), O(db_host), O(db_port), O(db_name), O(db_user),
    O(db_password), O(tunnel), O(connect_timeout_s)) are shared by every module of the
    C(group/leaseguard.deploy.leaseguard) action group, so that C(module_defaults) for the
    group can set them once; this module reaches no database and ignores them.
"""
