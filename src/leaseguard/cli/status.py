"""`leaseguard status PATH`: read the status file a running (or finished) drain rewrites
after every poll; one that cannot tell the truth is `available: false` with a reason, exit 1."""

from __future__ import annotations

import argparse
import json
from typing import Any

from leaseguard.core.errors import EXIT_FAILED, EXIT_PROCEED
from leaseguard.orchestration.drain_status import read_status, status_line

DESCRIPTION = """\
Print the snapshot a drain started with --status-file PATH keeps up to date: state,
host(s), decision so far, live/stale/orphaned/queued counts, the longest remaining lease,
elapsed vs deadline, the intake it paused and its counters. Exit status: 0 the snapshot is
available (the drain runs, or finished: see state and exit_status), 1 it is not (no file,
unreadable, or stale: its writer is gone and the drain did not finish).
"""


def add_status_command(commands: Any) -> None:
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
