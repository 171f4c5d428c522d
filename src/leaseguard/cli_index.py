"""`leaseguard index-sql`: print the partial index the guard query wants, for a contract.

It needs no database: the statement is derived from the contract alone (table, status
column, claimed and queued statuses, claimed_at and expiry columns), so it can be reviewed
and shipped as a migration like any other. It takes `leaseguard check`'s contract flags and
--config file unchanged; the ones that do not shape the index are accepted and ignored.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from leaseguard.cli_contract import add_config_option, add_table_options, contract_from_args
from leaseguard.db import connect, translate_errors
from leaseguard.errors import EXIT_FAILED, ConfigError, LeaseguardError
from leaseguard.indexing import index_advice, recommended_index_sql

DESCRIPTION = """\
Print the CREATE INDEX CONCURRENTLY statement of the partial index that keeps the guard
query's cost flat as the table grows (it covers only the claimed and queued statuses).
Run it on its own, outside a transaction block, e.g.
`leaseguard index-sql --config leaseguard.yaml | psql "$DSN"`. With --dsn it reads the
table first: it names an existing index that already serves the guard (River's and Oban's
do) instead of a new one, and gives a partitioned table (pg-boss) the per-partition recipe.
"""


def add_index_sql_command(commands: Any) -> None:
    """Register `index-sql` on the subparsers of `leaseguard`'s parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "index-sql",
        help="print the partial index that keeps the guard query flat (no database needed)",
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
    if args.dsn:
        try:
            with connect(args.dsn, contract) as conn, translate_errors(contract):
                lines = index_advice(conn, contract)
        except ConfigError:
            raise
        except LeaseguardError as exc:
            print(f"leaseguard: index-sql failed ({type(exc).__name__}): {exc}", file=sys.stderr)
            return EXIT_FAILED
        print("\n".join(lines))
        return 0
    # A constant comment: a table name may hold a newline, which would end a `--` comment.
    print("-- leaseguard: the guard query's partial index; run it alone, not in a transaction")
    print(recommended_index_sql(contract))
    return 0
