"""`leaseguard index-sql`: print the index the guard's checks want, for a contract (with
`check`'s contract flags and --config; those that do not shape the index are ignored)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from leaseguard.adapters.db import connect, translate_errors
from leaseguard.adapters.indexing import index_advice, offline_advice
from leaseguard.cli.contract import add_config_option, add_table_options, contract_from_args
from leaseguard.core.errors import EXIT_FAILED, ConfigError, LeaseguardError

DESCRIPTION = """\
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


def add_index_sql_command(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "index-sql",
        help="print the index that keeps the guard's checks flat (no database needed)",
        description=DESCRIPTION,
    )
    add_config_option(parser)
    parser.add_argument(
        "--dsn",
        help="read the table first (existing indexes, partitions); without it no database "
        "is needed",
    )
    add_table_options(parser)
    parser.set_defaults(handler=run_index_sql)


def run_index_sql(args: argparse.Namespace) -> int:
    """Print the statement; a bad contract is a ConfigError (exit 2, printed by main)."""
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
        print(f"leaseguard: index-sql failed ({type(exc).__name__}): {exc}", file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(lines))
    return 0
