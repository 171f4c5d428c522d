# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # How the controller reaches a host's database (the SSH side is the host's inventory).
    DOCUMENTATION = r"""
options:
  dsn:
    description:
      - A libpq connection string; never logged or returned. If not set, E(LEASEGUARD_DSN).
      - Its host and port are the tunnel's far end; a different O(db_host) or O(db_port) beside them is an error.
    type: str
  db_host:
    description: The database address as the host (O(tunnel=true)) or the controller sees it. If not set, the
      host in O(dsn), else V(127.0.0.1) through the tunnel, libpq's default without.
    type: str
  db_port:
    description: The database port. If not set, the port in O(dsn), else V(5432).
    type: int
  db_name:
    description: The database holding the work table. If not set, E(PGDATABASE).
    type: str
  db_user:
    description: The role to log in as; read-only is enough. If not set, E(PGUSER).
    type: str
  db_password:
    description: The password of O(db_user); never logged or returned. If not set,
      E(LEASEGUARD_DB_PASSWORD), then E(PGPASSWORD), or libpq's C(.pgpass).
    type: str
  tunnel:
    description:
      - Reach the database through an SSH tunnel opened with the host's inventory settings (including
        C(ProxyJump) and C(UserKnownHostsFile)). An unknown host key is refused unless the host opts out
        (C(host_key_checking=false), C(StrictHostKeyChecking=no) or C(accept-new)); a changed key always is.
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
  - The database options are shared by the C(group/leaseguard.deploy.leaseguard) action group for
    C(module_defaults); this module reaches no database and ignores them.
"""
