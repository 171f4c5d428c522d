"""`fab -H host resume`: give back the intake pauses a drain recorded and never resumed."""

from __future__ import annotations

import json

from fabric import task
from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.core.errors import EXIT_FAILED, LeaseguardError
from leaseguard.core.verdict import failure_result
from leaseguard.fabric.fleet import failure_line, fleet, fleet_hosts
from leaseguard.fabric.settings import connection_to, settings_or_exit


@task(
    help={
        "job": "only this recorded job (repeatable; default: every recorded job)",
        "json_": "print what was resumed as JSON",
    },
    iterable=["job"],
)
@fleet
def resume(c: Context, json_: bool = False, job: list[str] | None = None) -> None:
    """Give back the intake pauses a drain recorded and never resumed (through the first host).

    Jobs an operator disabled without a drain have no record and are never touched.
    """
    # Imported when a resume runs: they bring psycopg and the budgets code.
    from leaseguard.adapters.resume import resume_lines, resume_pauses
    from leaseguard.orchestration.ssh_session import tunnelled_conninfo

    settings = settings_or_exit(c)
    host = fleet_hosts(c)[0]
    connection = connection_to(host, c, settings)
    try:
        with tunnelled_conninfo(connection, settings.conninfo, settings.address) as conninfo:
            outcome = resume_pauses(
                conninfo,
                cron_database=settings.drain.cron_database,
                user=settings.drain.cron_user,
                password=settings.drain.cron_password,
                jobs=list(job or []) or None,
                connect_timeout_s=settings.contract.connect_timeout_s,
            )
    except LeaseguardError as exc:
        print(json.dumps(failure_result(exc, host)) if json_ else failure_line(host, exc))
        raise Exit(code=EXIT_FAILED) from None
    finally:
        connection.close()
    print(json.dumps(outcome) if json_ else resume_lines(outcome))
