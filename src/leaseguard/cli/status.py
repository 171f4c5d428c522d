"""`leaseguard status PATH`: read a running (or finished) drain's status file.

The other half of a quiet drain: a second process (an operator's shell, a CI step, a
monitoring check) reads the snapshot the drain rewrites after every poll. A file that
cannot tell the truth (missing, unreadable, not a drain status, or left behind by a
writer that died before finishing) is `available: false` with a reason and exit 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from leaseguard.core.errors import EXIT_FAILED, EXIT_PROCEED
from leaseguard.orchestration.drain_status_read import read_status, status_line

DESCRIPTION = """\
Print the snapshot a drain started with --status-file PATH keeps up to date: state,
host(s), decision so far, live/stale/orphaned/queued counts, the longest remaining lease,
elapsed vs deadline, the intake it paused and its counters. Exit status: 0 the snapshot is
available (the drain runs, or finished: see state and exit_status), 1 it is not (no file,
unreadable, or stale: its writer is gone and the drain did not finish).
"""


def add_status_command(commands: Any) -> None:
    """Register `status` on the subparsers of `leaseguard`'s parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "status",
        help="print a drain's status file (written with drain --status-file)",
        description=DESCRIPTION,
    )
    parser.add_argument("path", metavar="PATH", help="the drain's --status-file")
    parser.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    parser.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace) -> int:
    status = read_status(args.path)
    print(json.dumps(status) if args.json else status_line(status))
    return EXIT_PROCEED if status["available"] else EXIT_FAILED
