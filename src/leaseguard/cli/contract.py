"""The contract's command-line options (defaults < --config file < flags) and `index-sql`."""

from __future__ import annotations

import argparse
from typing import Any

from leaseguard.cli.main import say
from leaseguard.core.config_values import NOT_ASCII
from leaseguard.core.contract import (
    CONFIG_KEYS,
    CRON_BUDGETS_SECTION,
    RELATION_KINDS,
    Contract,
    load_config_file,
    load_contract,
)
from leaseguard.core.errors import EXIT_FAILED, ConfigError, LeaseguardError
from leaseguard.core.lookups import is_decimal_text
from leaseguard.core.presets import PRESETS

DSN_HELP = "libpq connection string; default $LEASEGUARD_DSN, else the PG* variables and ~/.pgpass"


def number_arg(text: str) -> float:
    """A flag's number in ASCII digits; the error never repeats the value (argparse's would)."""
    if not is_decimal_text(text):
        raise argparse.ArgumentTypeError(NOT_ASCII)
    return float(text)


SECONDS: dict[str, Any] = {"type": number_arg, "metavar": "N"}  # a number of seconds


def add_config_option(container: Any, dsn_help: str = DSN_HELP, config_help: str = "") -> None:
    """--config and --dsn, on a parser or an argument group."""
    config_help = config_help or (
        "YAML file with the contract keys (top level or under 'leaseguard:'); flags override it"
    )
    container.add_argument("--config", metavar="FILE", help=config_help)
    container.add_argument("--dsn", help=dsn_help)


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """Where the work is and what a lease is; each flag's dest is its contract key."""
    table = parser.add_argument_group("contract (where the work is and what a lease is)")
    table.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="a job queue's stock schema and liveness rule (docs/queues.md); "
        "every other option overrides it",
    )
    table.add_argument("--table", help="table holding the work rows (default execution_runs)")
    table.add_argument(
        "--schema",
        help="schema of --table: the table is named schema.table, never looked up through "
        "search_path (default: search_path finds it)",
    )
    table.add_argument(
        "--relation-kind",
        choices=RELATION_KINDS,
        help="what --table is: a table (default) or, on purpose, a view over the tables that "
        "hold the rows (materialized views are never accepted)",
    )
    table.add_argument("--id-column", help="column identifying a row in reports (default id)")
    table.add_argument("--status-column", help="column holding the row's status (default status)")
    table.add_argument(
        "--claimed-status",
        dest="claimed_statuses",
        nargs="+",
        action="extend",
        metavar="S",
        help="status(es) meaning a worker holds the row (default running)",
    )
    table.add_argument(
        "--queued-status",
        dest="queued_statuses",
        nargs="*",
        action="extend",
        metavar="S",
        help="status(es) meaning nobody holds it yet, never protected "
        "(default open; give the flag alone for none)",
    )
    table.add_argument(
        "--finished-status",
        dest="finished_statuses",
        nargs="*",
        action="extend",
        metavar="S",
        help="status(es) of rows nobody will run again (default done failed; give the flag "
        "alone for none). A status in none of the three lists fails the check",
    )
    table.add_argument(
        "--claimed-at-column", help="column the worker sets when it takes (or renews) the claim"
    )
    table.add_argument(
        "--lease-multiplier",
        dest="lease.multiplier",
        type=number_arg,
        metavar="X",
        help="lease = X times the task timeout (default 2.0)",
    )
    table.add_argument(
        "--lease-expires-column",
        dest="lease.expires_at_column",
        metavar="C",
        help="per-row lease expiry column; replaces the multiplier rule",
    )
    table.add_argument(
        "--clock-skew-s",
        **SECONDS,
        help="tolerance when comparing the runtime start with claimed_at",
    )
    table.add_argument(
        "--timestamp-zone",
        metavar="ZONE",
        help="zone in which naive (timestamp without time zone) columns were written; "
        "required when the claimed-at or expiry column is naive (never the session's TimeZone)",
    )
    table.add_argument(
        "--statement-timeout-ms",
        type=int,
        metavar="N",
        help="the guard query's own time budget (default 5000)",
    )


def contract_from_args(args: argparse.Namespace) -> Contract:
    """Layers: defaults < --config file (its `cron_budgets:` is `leaseguard budgets`', its
    `drain:` `leaseguard drain`'s) < flags."""
    file_layer = load_config_file(args.config) if args.config else {}
    file_layer.pop(CRON_BUDGETS_SECTION, None)
    file_layer.pop("drain", None)
    flags: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        section, _, name = key.rpartition(".")
        if getattr(args, key, None) is not None:
            (flags.setdefault(section, {}) if section else flags)[name] = getattr(args, key)
    return load_contract(file_layer, flags)


def drain_section(args: argparse.Namespace) -> dict[str, Any]:
    """The --config file's `drain:` section, as fabric.yaml's (empty without one)."""
    section = (load_config_file(args.config) if args.config else {}).get("drain") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"config file {args.config}: 'drain' must be a mapping")
    return section


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
    parser.set_defaults(handler=run_index_sql)


def run_index_sql(args: argparse.Namespace) -> int:
    from leaseguard.adapters.db import connect, translate_errors
    from leaseguard.adapters.indexing import index_advice, offline_advice

    contract = contract_from_args(args)
    if not args.dsn:
        print("\n".join(offline_advice(contract)))
        return 0
    try:
        with connect(args.dsn, contract.connect_timeout_s) as conn, translate_errors(contract):
            lines = index_advice(conn, contract)
    except ConfigError:
        raise
    except LeaseguardError as exc:
        say(f"index-sql failed ({type(exc).__name__}): {exc}")
        return EXIT_FAILED
    print("\n".join(lines))
    return 0
