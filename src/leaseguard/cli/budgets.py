"""`leaseguard budgets` (per job, the live and declared budget, its source and state) and
`index-sql`: what a deploy keeps right in the database beside the guard's table."""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext
from datetime import UTC, datetime

from leaseguard.adapters.budgets import converge_jobs
from leaseguard.adapters.db import connect, translate_errors
from leaseguard.adapters.pauses import scan_leftovers
from leaseguard.cli.main import (
    CRON_DATABASE_HELP,
    add_config_option,
    add_table_options,
    contract_from_args,
    resolve_dsn,
    say,
)
from leaseguard.core import errors
from leaseguard.core.budgets.config import format_budget, format_optional, load_budget_config
from leaseguard.core.budgets.planning import ON_DRIFT_CHOICES, Action
from leaseguard.core.contract import Contract

# What a person reads for a job to write: before --apply, and after.
_PENDING = {Action.CREATE: "missing", Action.UPDATE: "differs"}
_DONE = {Action.CREATE: "created", Action.UPDATE: "updated"}


def add_budgets_command(parser: argparse.ArgumentParser) -> None:
    parser.description = """\
    Compare each declared pg_cron job's statement budget (set statement_timeout before its
    function) with the live cron.job, per environment: an override declared for the
    environment wins over the default; a live budget that differs from a default is drift,
    reported and never overwritten unless --on-drift apply. Read-only unless --apply, and all
    or nothing: while any job drifts or is refused, --apply writes no job at all.
    Exit status: 0 converged, 3 not converged (drift, refused job, or changes not applied),
    1 failed, 2 usage.
    """
    add_config_option(
        parser,
        "libpq connection string of the database the jobs run in; default "
        "$LEASEGUARD_DSN, else the PG* variables and ~/.pgpass",
        "YAML file with a cron_budgets section (top level or under 'leaseguard:')",
    )
    parser.add_argument(
        "--environment",
        metavar="NAME",
        help="whose cron_budgets.overrides apply (default: none, every budget is the default)",
    )
    parser.add_argument("--cron-database", metavar="DB", help=CRON_DATABASE_HELP)
    parser.add_argument(
        "--apply",
        action="store_true",
        help="create missing jobs and update differing ones (default: only report)",
    )
    parser.add_argument(
        "--on-drift",
        choices=ON_DRIFT_CHOICES,
        default="report",
        help="a live budget differing from a default: report it and leave it (default), "
        "or overwrite it (with --apply)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run_budgets(args: argparse.Namespace) -> int:
    if not args.config:
        raise errors.ConfigError("budgets needs --config FILE with a cron_budgets section")
    declared = load_budget_config(args.config).declare(args.environment)
    conninfo = resolve_dsn(args)
    try:
        plan, _ = converge_jobs(
            nullcontext(conninfo),
            declared,
            cron_database=args.cron_database,
            on_drift=args.on_drift,
            check_mode=not args.apply,
        )
    except errors.ConfigError:
        raise
    except errors.LeaseguardError as exc:  # fail closed; the message never shows the DSN
        now = datetime.now(UTC)
        if args.json:
            error = {"type": exc.kind, "message": str(exc)}
            print(json.dumps({"state": "failed", "checked_at": now.isoformat(), "error": error}))
        else:
            print(f"{now:%Y-%m-%dT%H:%M:%SZ} leaseguard budgets state=failed error={exc.kind}")
        say(f"budgets failed: {exc}")
        return errors.EXIT_FAILED
    assert plan is not None
    now = datetime.now(UTC)
    if args.json:
        print(json.dumps({"checked_at": now.isoformat(), **plan.as_dict()}))
    for job in [] if args.json else plan.jobs:
        live = format_optional(job.live_budget_ms) or "none"
        live = "-" if job.live is None else "?" if job.refused else live
        state = (_DONE if plan.applied else _PENDING)[job.action] if job.writes else job.action
        print(
            f"{now:%Y-%m-%dT%H:%M:%SZ} leaseguard budgets job={job.job.name} "
            f"live={live} declared={format_budget(job.job.budget_ms)} "
            f"source={job.job.source_label} state={state}"
        )
    for drift in (drift for drift in plan.drift if not drift["applied"]):
        say(
            f"drift: job {drift['job']} live={drift['live'] or 'none'} declared="
            f"{drift['declared']} ({drift['source']}): left untouched; declare an override for "
            "this environment, or converge it deliberately with --apply --on-drift apply"
        )
    for warning in plan.warnings:
        say(f"warning: {warning}")
    pending = ", ".join(job.job.name for job in plan.jobs if job.writes and not plan.applied)
    if pending and plan.refusals:
        say(
            f"not applied: {pending}; nothing is written while a job drifts or is refused "
            f"({'; '.join(plan.refusals)})"
        )
    elif pending:
        say(f"not applied (read-only run): {pending}; rerun with --apply")
    timeout_s = Contract.connect_timeout_s
    for warning in scan_leftovers(
        lambda: connect(conninfo, timeout_s, writable=True, dbname=args.cron_database)
    ):
        say(f"warning: {warning}")
    return errors.EXIT_PROCEED if plan.converged else errors.EXIT_DRIFT


def add_index_sql_command(parser: argparse.ArgumentParser) -> None:
    parser.description = """\
    Print the CREATE INDEX CONCURRENTLY statement of the index that keeps the guard's checks
    flat as the table grows: the guard query reads only the claimed and queued entries, and the
    status check (every status in the table classified) visits each distinct status once.
    Run it on its own, outside a transaction block, e.g.
    `leaseguard index-sql --config leaseguard.yaml | psql "$DSN"`. It supersedes the partial
    *_leaseguard_claims index of earlier versions, which can be dropped once it is built. With
    --dsn it reads the table first: it names an existing index that already serves the guard
    (one leading with the status column: River's and Oban's do) instead of a new one, and gives
    a partitioned table (pg-boss) the per-partition recipe. Without --dsn a preset whose table
    is partitioned (pg-boss) gets no statement, only that advice: CONCURRENTLY is refused there.
    """
    add_config_option(
        parser,
        "read the table first (existing indexes, partitions); without it no database is needed",
    )
    add_table_options(parser)


def run_index_sql(args: argparse.Namespace) -> int:
    from leaseguard.adapters.indexing import index_advice, offline_advice

    contract = contract_from_args(args)
    if not args.dsn:
        print("\n".join(offline_advice(contract)))
        return 0
    try:
        with connect(args.dsn, contract.connect_timeout_s) as conn, translate_errors(contract):
            lines = index_advice(conn, contract)
    except errors.ConfigError:
        raise
    except errors.LeaseguardError as exc:
        say(f"index-sql failed ({type(exc).__name__}): {exc}")
        return errors.EXIT_FAILED
    print("\n".join(lines))
    return 0
