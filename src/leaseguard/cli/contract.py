"""The contract's command-line options, shared by `check`, `drain` and `index-sql`.

Layers, lowest first: the built-in defaults, the --config file, the flags.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from leaseguard.core.config_values import NOT_ASCII
from leaseguard.core.contract import (
    CONFIG_KEYS,
    CRON_BUDGETS_SECTION,
    RELATION_KINDS,
    Contract,
    load_config_file,
    load_contract,
)
from leaseguard.core.presets import PRESETS
from leaseguard.core.timeouts import is_decimal_text


def number_arg(text: str) -> float:
    """A flag's number, in ASCII digits; the error never repeats the value (argparse's own
    "invalid float value: '...'" would, and float() reads any script's digits)."""
    if not is_decimal_text(text):
        raise argparse.ArgumentTypeError(NOT_ASCII)
    return float(text)


def add_config_option(container: Any) -> None:
    """--config, on a parser or an argument group."""
    container.add_argument(
        "--config",
        metavar="FILE",
        help="YAML file with the contract keys "
        "(top level or under 'leaseguard:'); flags override it",
    )


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """Where the work is and what a lease is."""
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
        type=number_arg,
        metavar="N",
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
    """Layers: defaults < --config file < flags."""
    file_layer = load_config_file(args.config) if args.config else {}
    # The same file may declare the pg_cron budgets; `leaseguard budgets` reads that section.
    file_layer.pop(CRON_BUDGETS_SECTION, None)
    return load_contract(file_layer, flag_layer(args))


def flag_layer(args: argparse.Namespace) -> dict[str, Any]:
    """The contract keys given as flags (each flag's dest is its key)."""
    layer: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        section, _, name = key.rpartition(".")
        value = getattr(args, key, None)
        if value is not None:
            (layer.setdefault(section, {}) if section else layer)[name] = value
    return layer


def resolve_dsn(args: argparse.Namespace) -> str:
    return str(args.dsn or os.environ.get("LEASEGUARD_DSN", ""))
