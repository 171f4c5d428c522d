class ModuleDocFragment:
    # How the controller reaches a host's database (the SSH side is the host's inventory), and
    # the action group whose members share it; a module's own attribute description wins.
    DOCUMENTATION = r"""
options:
  dsn:
    description: A libpq connection string; never logged or returned. If not set, E(LEASEGUARD_DSN). Its host and
      port are the tunnel's far end; a different O(db_host) or O(db_port) beside them is an error.
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
    description: Reach the database through an SSH tunnel opened with the host's inventory settings (including
      C(ProxyJump) and C(UserKnownHostsFile)), or with V(false) (or a C(local) connection) from the controller
      directly. An unknown host key is refused unless the host opts out (C(host_key_checking=false),
      C(StrictHostKeyChecking=no) or C(accept-new)); a changed key always is.
    type: bool
    default: true
  connect_timeout_s:
    description: Seconds to wait for the database connection.
    type: int
    default: 10
attributes:
  action_group:
    support: full
    membership:
      - leaseguard.deploy.leaseguard
    description: Use C(group/leaseguard.deploy.leaseguard) in C(module_defaults) to set shared options once.
  diff_mode:
    support: none
    description: Nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller; commands run on the host through the task's connection.
"""

    # The group's members that reach no database.
    UNUSED = r"""
options: {}
notes:
  - The database options are shared by the C(group/leaseguard.deploy.leaseguard) action group for
    C(module_defaults); this module reaches no database and ignores them.
"""

    # Where a host's intake is held: pg_cron jobs, or commands run on the host.
    INTAKE = r"""
options:
  pause_cron_jobs:
    description: pg_cron jobs (by name) that take new work, paused while intake is held; each must exist and be
      visible to the role.
    type: list
    elements: str
    default: []
  cron_database:
    description: The database holding pg_cron's C(cron.job). If not set, the one of O(db_name) or O(dsn).
    type: str
  cron_user:
    description: The role that owns the pg_cron jobs, when the guard's is another; pg_cron lets each role see and
      alter only its own jobs.
    type: str
  cron_password:
    description: The password of O(cron_user); never logged or returned. If not set, E(LEASEGUARD_CRON_PASSWORD),
      else libpq's E(PGPASSWORD) or C(.pgpass).
    type: str
  pause_command:
    description: An argv run on the host to stop its intake; needs O(resume_command).
    type: list
    elements: str
    default: []
  resume_command:
    description: The argv run on the host to restart its intake afterwards (on every exit path).
    type: list
    elements: str
    default: []
  resume_retry_s:
    description: Retry a failed resume with backoff for this many seconds, each attempt over a fresh tunnel, then
      fail naming what stays paused.
    type: float
    default: 60.0
"""
