"""`leaseguard index-sql`: print the index the guard's checks want, for a contract.

It needs no database: the statement is derived from the contract alone (table, status
column, claimed_at and expiry columns), so it can be reviewed
and shipped as a migration like any other. It takes `leaseguard check`'s contract flags and
--config file unchanged; the ones that do not shape the index are accepted and ignored.
"""

from __future__ import annotations

import argparse
from typing import Any

from leaseguard.cli_contract import add_config_option, add_table_options, contract_from_args
from leaseguard.indexing import recommended_index_sql

DESCRIPTION = """\
Print the CREATE INDEX CONCURRENTLY statement of the index that keeps the guard's checks
flat as the table grows: the guard query reads only the claimed and queued entries, and the
status check (every status in the table classified) visits each distinct status once.
Run it on its own, outside a transaction block, e.g.
`leaseguard index-sql --config leaseguard.yaml | psql "$DSN"`. It supersedes the partial
*_leaseguard_claims index of earlier versions, which can be dropped once it is built. Not
for an enum status column: PostgreSQL cannot index an enum's ::text, which the guard
compares; an index on the plain column serves the status check there.
"""


def add_index_sql_command(commands: Any) -> None:
    """Register `index-sql` on the subparsers of `leaseguard`'s parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "index-sql",
        help="print the index that keeps the guard's checks flat (no database needed)",
        description=DESCRIPTION,
    )
    add_config_option(parser)
    add_table_options(parser)
    parser.set_defaults(handler=run_index_sql)


def run_index_sql(args: argparse.Namespace) -> int:
    """Print the statement; a bad contract is a ConfigError (exit 2, printed by main)."""
    contract = contract_from_args(args)
    # A constant comment: a table name may hold a newline, which would end a `--` comment.
    print("-- leaseguard: the guard's status index; run it alone, not in a transaction")
    print("-- it supersedes an earlier version's partial *_leaseguard_claims index")
    print(recommended_index_sql(contract))
    return 0
