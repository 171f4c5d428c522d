# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations


class ModuleDocFragment:
    # How the controller reaches a host's database (the SSH side is the host's inventory).
    DOCUMENTATION = r"""
options:
  dsn:
    description:
      - A libpq connection string (C(sslmode), C(options), ...); never logged or returned. If
        not set, E(LEASEGUARD_DSN) on the controller.
      - Its host and port are the tunnel's far end (as the host sees it); a different
        O(db_host) or O(db_port) beside them is a usage error naming both.
    type: str
  db_host:
    description:
      - The database address as seen from the host (O(tunnel=true)) or the controller. If not
        set, the host in O(dsn); else V(127.0.0.1) through the tunnel, libpq's default without.
    type: str
  db_port:
    description:
      - The database port at O(db_host). If not set, the port in O(dsn), else V(5432)
        (libpq's default without a tunnel).
    type: int
  db_name:
    description:
      - The database holding the work table. If not set, E(PGDATABASE) on the controller.
    type: str
  db_user:
    description:
      - The role the guard logs in as; a read-only role is enough. If not set, E(PGUSER) on
        the controller.
    type: str
  db_password:
    description:
      - The password of O(db_user); never logged or returned. If not set,
        E(LEASEGUARD_DB_PASSWORD), then E(PGPASSWORD), on the controller, or libpq's C(.pgpass).
    type: str
  tunnel:
    description:
      - Reach the database through an SSH tunnel opened with the host's inventory settings
        (host, port, user, key, C(ProxyJump) and C(UserKnownHostsFile) in the ssh arguments).
        An unknown host key is refused unless the host opts out (C(host_key_checking=false),
        C(StrictHostKeyChecking=no) or C(accept-new)); a changed key always is.
      - V(false) (or a C(local) connection) connects from the controller directly.
    type: bool
    default: true
  connect_timeout_s:
    description: Seconds to wait for the database connection.
    type: int
    default: 10
"""

    # The group's members that reach no database.
    UNUSED = r"""
options: {}
notes:
  - The database connection options are shared by every module of the
    C(group/leaseguard.deploy.leaseguard) action group, so that C(module_defaults) can set
    them once; this module reaches no database and ignores them.
"""
