"""The errors leaseguard raises on purpose, and their exit statuses. A message names what failed,
never a DSN, a password or raw driver text: these messages reach CI logs and chat."""

EXIT_PROCEED, EXIT_FAILED, EXIT_USAGE, EXIT_DRIFT = 0, 1, 2, 3
EXIT_DEFER = 75  # EX_TEMPFAIL: try again later


class LeaseguardError(Exception):
    """A check could not be completed; never a reason to proceed."""

    exit_status = EXIT_FAILED

    @property
    def kind(self) -> str:
        return type(self).__name__


class ConfigError(LeaseguardError):
    """The contract or the options given are invalid (a usage error)."""

    exit_status = EXIT_USAGE


class TimeoutValueError(LeaseguardError, ValueError):
    """A task timeout is not a positive finite number of seconds."""


class LookupFailed(LeaseguardError):
    """A host lookup (container, unit, process, file, variable) found nothing usable."""


class PollFailed(LeaseguardError):
    """A drain poll raised an exception leaseguard did not expect; only its class is kept."""


class TunnelError(LeaseguardError):
    """The SSH connection or the tunnel to the database could not be used."""


class DatabaseError(LeaseguardError):
    """The guard's query against the protected system's database failed."""


class DatabaseUnavailable(DatabaseError):
    """No connection to the database could be made."""


class SchemaMismatch(DatabaseError):
    """The contract names a table or column the database does not have."""


class NotPrimary(DatabaseError):
    """The guard reached a standby: replayed late or not at all, it cannot say what is live."""


class GuardQueryFailed(DatabaseError):
    """The guard query ran but did not finish: timeout, lock, privileges, ..."""


class UnclassifiedStatus(DatabaseError):
    """The table holds a status the contract classes neither claimed, queued nor finished."""


class CommandFailed(LeaseguardError):
    """The command run under an intake hold could not start or run (not its exit status)."""


class DrainInterrupted(LeaseguardError):
    """A signal (Ctrl-C, SIGTERM) stopped the drain; intake is resumed before the exit."""


class IntakeNotResumed(LookupFailed):
    """Intake paused by a drain could not be given back within the retry window."""


class IntakeLost(DatabaseError):
    """A held pg_cron job is active again: switched on, or re-created, by something else."""
