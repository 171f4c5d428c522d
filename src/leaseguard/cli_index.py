"""`leaseguard index-sql`: print the partial index the guard query wants, for a contract.

It needs no database: the statement is derived from the contract alone (table, status
column, claimed and queued statuses, claimed_at and expiry columns), so it can be reviewed
and shipped as a migration like any other. The flags that shape the index are spelled as
`leaseguard check` spells them, and a check's --config file works unchanged.
"""

from __future__ import annotations

import argparse
from typing import Any

from leaseguard.contract import load_config_file, load_contract
from leaseguard.indexing import recommended_index_sql

DESCRIPTION = """\
Print the CREATE INDEX CONCURRENTLY statement of the partial index that keeps the guard
query's cost flat as the table grows (it covers only the claimed and queued statuses).
Run it on its own, outside a transaction block, e.g.
`leaseguard index-sql --config leaseguard.yaml | psql "$DSN"`. Not for an enum
status column: PostgreSQL cannot index an enum's ::text, which the guard compares.
"""

# flag destination -> contract key (the same names `leaseguard check` uses)
_FLAG_KEYS = (
    ("table", "table"),
    ("status_column", "status_column"),
    ("claimed_status", "claimed_statuses"),
    ("queued_status", "queued_statuses"),
    ("claimed_at_column", "claimed_at_column"),
)


def add_index_sql_command(commands: Any) -> None:
    """Register `index-sql` on the subparsers of `leaseguard`'s parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "index-sql",
        help="print the partial index that keeps the guard query flat (no database needed)",
        description=DESCRIPTION,
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML file with the contract keys (top level or under 'leaseguard:'); "
        "flags override it",
    )
    table = parser.add_argument_group("contract (same options as `leaseguard check`)")
    table.add_argument("--table", help="table holding the work rows (default execution_runs)")
    table.add_argument("--status-column", help="column holding the row's status (default status)")
    table.add_argument(
        "--claimed-status",
        nargs="+",
        action="extend",
        metavar="S",
        help="status(es) meaning a worker holds the row (default running)",
    )
    table.add_argument(
        "--queued-status",
        nargs="*",
        action="extend",
        metavar="S",
        help="status(es) meaning nobody holds it yet (default open; give the flag alone for none)",
    )
    table.add_argument("--claimed-at-column", help="column the worker sets when it claims")
    table.add_argument(
        "--lease-expires-column",
        metavar="C",
        help="per-row lease expiry column (indexed too when given)",
    )
    parser.set_defaults(handler=run_index_sql)


def run_index_sql(args: argparse.Namespace) -> int:
    """Print the statement; a bad contract is a ConfigError (exit 2, printed by main)."""
    file_layer = load_config_file(args.config) if args.config else {}
    contract = load_contract(file_layer, _flag_layer(args))
    # A constant comment: a table name may hold a newline, which would end a `--` comment.
    print("-- leaseguard: the guard query's partial index; run it alone, not in a transaction")
    print(recommended_index_sql(contract))
    return 0


def _flag_layer(args: argparse.Namespace) -> dict[str, Any]:
    layer: dict[str, Any] = {
        key: getattr(args, flag) for flag, key in _FLAG_KEYS if getattr(args, flag) is not None
    }
    if args.lease_expires_column is not None:
        layer["lease"] = {"expires_at_column": args.lease_expires_column}
    return layer
