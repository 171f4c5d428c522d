"""The budgets use case the CLI's `budgets` and the cron_budget module run: converge the
declared pg_cron jobs, set jobs' active flags, give back recorded intake holds."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from leaseguard.adapters.budgets import converge_budgets
from leaseguard.adapters.cron import ActivePlan, set_jobs_active, validate_active
from leaseguard.adapters.db import connect
from leaseguard.adapters.resume import resume_pauses
from leaseguard.core.budgets.config import BudgetConfig
from leaseguard.core.budgets.planning import BudgetPlan


def converge_jobs(
    path: AbstractContextManager[str],
    declared: BudgetConfig | None,
    *,
    active: Mapping[str, bool] | None = None,
    cron_database: str | None = None,
    on_drift: str = "report",
    check_mode: bool = False,
    connect_timeout_s: int = 10,
) -> tuple[BudgetPlan | None, ActivePlan | None]:
    """Converge `declared`, then (unless the plan is refused) set `active`'s flags.

    `path` yields the conninfo (a tunnel's, say) and is entered only once the input is
    valid: invalid input fails before anything is read.
    """
    wanted = validate_active(active) if active else {}
    plan = switched = None
    with path as conninfo:
        if declared is not None:
            plan = converge_budgets(
                conninfo,
                declared,
                cron_database=cron_database,
                on_drift=on_drift,
                check_mode=check_mode,
                connect_timeout_s=connect_timeout_s,
            )
            if plan.refusals:
                return plan, None
        if wanted:
            with connect(conninfo, connect_timeout_s, writable=True, dbname=cron_database) as conn:
                switched = set_jobs_active(conn, wanted, check_mode=check_mode)
    return plan, switched


def resume_holds(
    path: AbstractContextManager[str],
    *,
    cron_database: str | None = None,
    check_mode: bool = False,
    connect_timeout_s: int = 10,
) -> dict[str, Any]:
    """`resume_pauses` through `path`'s conninfo."""
    with path as conninfo:
        return resume_pauses(
            conninfo,
            cron_database=cron_database,
            check_mode=check_mode,
            connect_timeout_s=connect_timeout_s,
        )
