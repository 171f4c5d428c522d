"""`leaseguard` command line: flags become one contract, results exit statuses."""

import argparse
import difflib
import importlib
import json
import os
import socket
import sys
from collections.abc import Container, Sequence
from contextlib import AbstractContextManager, closing
from typing import TYPE_CHECKING, Any

from leaseguard import __version__
from leaseguard.core.errors import EXIT_FAILED, EXIT_USAGE, ConfigError, LeaseguardError

if TYPE_CHECKING:
    from leaseguard.core.contract import Contract
    from leaseguard.orchestration.session import GuardSession, IntakeAccess

DESCRIPTION = """\
Judge whether work is in flight by the protected system's own claim lease
(claimed, claimed after the runtime started, lease not expired), never by a
guessed activity window. Exit status: 0 proceed, 75 defer, 1 check failed, 2 usage.
"""

# Each subcommand's help, in --help order; its add_/run_ functions: here, else in cli.commands.
COMMANDS = {
    "check": "judge the table once and exit 0 (proceed), 75 (defer) or 1 (failed)",
    "drain": "pause intake, wait until no live lease remains (bounded by the lease), resume",
    "resume": "give back the intake pauses a drain recorded and never resumed",
    "budgets": "compare (or with --apply, converge) pg_cron jobs' statement budgets; "
    "exit 0 converged, 3 drift",
    "index-sql": "print the index that keeps the guard's checks flat (no database needed)",
    "status": "print a drain's status file (written with drain --status-file)",
}
CRON_DATABASE_HELP = "database holding pg_cron's cron.job (default: the DSN's)"
DSN_HELP = "libpq connection string; default $LEASEGUARD_DSN, else the PG* variables and ~/.pgpass"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # No global option takes a value: the subcommand is the first word.
    named = next((word for word in argv if not word.startswith("-")), "")
    args = build_parser(in_full={named}).parse_args(argv)
    try:
        return int(args.handler(args))
    except ConfigError as exc:
        say(str(exc))
        return EXIT_USAGE
    except LeaseguardError as exc:
        return report_failure(exc, as_json=getattr(args, "json", False))
    except KeyboardInterrupt:  # Ctrl-C: failed (never proceed), without a traceback
        if args.command == "check" and args.json:
            error = LeaseguardError("interrupted by a signal before the check completed")
            return report_failure(error, as_json=True, said="interrupted")
        say("interrupted")
        return EXIT_FAILED


def say(message: str) -> None:
    print(f"leaseguard: {message}", file=sys.stderr, flush=True)


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped subcommand, choice or option."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            hint = _did_you_mean(value, [str(c) for c in action.choices or ()])
            raise argparse.ArgumentError(action, exc.message + hint) from None

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # This parser's options and those of the subcommands built in full.
            subparsers = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
            parsers = [self, *(p for a in subparsers for p in a.choices.values())]
            names = [n for p in parsers for a in p._actions for n in a.option_strings]
            hint = [_did_you_mean(w.partition("=")[0], names) for w in extras if w[:2] == "--"]
            self.error(f"unrecognized arguments: {' '.join(extras)}{''.join(hint)}")
        return parsed


def _did_you_mean(word: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def build_parser(in_full: Container[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the COMMANDS `in_full` (default: all) get their options, the rest a name."""
    parser = Parser(prog="leaseguard", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"leaseguard {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_line in COMMANDS.items():
        command = commands.add_parser(name, help=help_line)
        if in_full is None or name in in_full:
            home = "main" if name in ("check", "status") else "commands"
            module = importlib.import_module(f"leaseguard.cli.{home}")
            snake = name.replace("-", "_")
            getattr(module, f"add_{snake}_command")(command)
            command.set_defaults(handler=getattr(module, f"run_{snake}"))
    return parser


def add_check_command(parser: argparse.ArgumentParser) -> None:
    parser.description = "Judge every claimed or queued row once. " + DESCRIPTION
    add_contract_options(parser)
    add_cron_database_option(parser)


def add_cron_database_option(parser: Any) -> None:
    parser.add_argument("--cron-database", metavar="DB", help=CRON_DATABASE_HELP)
    parser.add_argument(
        "--cron-user",
        metavar="ROLE",
        help="the role that owns the intake pg_cron jobs, when the DSN's is a read-only guard "
        "role (pg_cron shows each role only its own jobs); its password from "
        "$LEASEGUARD_CRON_PASSWORD, else PGPASSWORD / ~/.pgpass",
    )


def add_contract_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command judging the table: the contract, the DSN, the host's facts."""
    add_config_option(parser.add_argument_group("connection"))
    add_table_options(parser)
    facts = parser.add_argument_group("facts about the host (instead of looking them up)")
    facts.add_argument(
        "--task-timeout-s",
        metavar="N",
        help="the protected system's task timeout in seconds, instead of "
        "looking it up per task_timeout.source",
    )
    facts.add_argument(
        "--runtime-started-at",
        metavar="ISO8601",
        help="when the worker runtime started, with a timezone; older claims are orphans",
    )
    facts.add_argument(
        "--host-facts",
        action="append",
        metavar="HOST=TIMEOUT_S[,STARTED_AT]",
        help="one host of a fleet: its task timeout and (optionally) its runtime start "
        "(ISO 8601 with a timezone); repeat per host. The fleet is judged once: orphan "
        "cut-off = the oldest start, lease = the longest",
    )
    facts.add_argument(
        "--facts-file",
        metavar="FILE",
        help="YAML or JSON mapping each host to {task_timeout_s, runtime_started_at} "
        "(registered leaseguard.deploy.task_timeout results fit as they are); judged "
        "like --host-facts",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the timeline line"
    )


def number_arg(text: str) -> float:
    """A flag's number in ASCII digits; the error never repeats the value (argparse's would)."""
    from leaseguard.core.config_values import NOT_ASCII
    from leaseguard.core.lookups import is_decimal_text

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
    from leaseguard.core.contract import RELATION_KINDS
    from leaseguard.core.presets import PRESETS

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
    statuses = {  # each list's nargs (the queued and finished lists may be given empty), help
        "claimed": ("+", "status(es) meaning a worker holds the row (default running)"),
        "queued": (
            "*",
            "status(es) meaning nobody holds it yet, never protected "
            "(default open; give the flag alone for none)",
        ),
        "finished": (
            "*",
            "status(es) of rows nobody will run again (default done failed; give the flag "
            "alone for none). A status in none of the three lists fails the check",
        ),
    }
    for kind, (nargs, what) in statuses.items():
        flag, dest = f"--{kind}-status", f"{kind}_statuses"
        table.add_argument(flag, dest=dest, nargs=nargs, action="extend", metavar="S", help=what)
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


def contract_from_args(args: argparse.Namespace) -> "Contract":
    """Layers: defaults < --config file (but `budgets`' and `drain`'s own sections) < flags."""
    from leaseguard.core import contract

    file_layer = contract.load_config_file(args.config) if args.config else {}
    file_layer.pop(contract.CRON_BUDGETS_SECTION, None)
    file_layer.pop("drain", None)
    flags: dict[str, Any] = {}
    for key in contract.CONFIG_KEYS:
        section, _, name = key.rpartition(".")
        if getattr(args, key, None) is not None:
            (flags.setdefault(section, {}) if section else flags)[name] = getattr(args, key)
    return contract.load_contract(file_layer, flags)


def given_facts(args: argparse.Namespace) -> dict[str, Any]:
    """This host's facts given as flags (they win over lookups); a bad value is a usage error."""
    from leaseguard.core.lookups import parse_timeout_s, parse_timestamp

    timeout, started = args.task_timeout_s, args.runtime_started_at
    try:
        timeout = None if timeout is None else parse_timeout_s(timeout, what="--task-timeout-s")
    except LeaseguardError as exc:
        raise ConfigError(str(exc)) from None
    try:
        started = parse_timestamp(started, what="the value") if started else None
    except LeaseguardError as exc:
        raise ConfigError(
            "--runtime-started-at needs a timezone (an ISO 8601 time such as "
            f"2026-01-01T12:00:00Z): {exc}"
        ) from None
    return {"task_timeout_s": timeout, "runtime_started_at": started}


def resolve_dsn(args: argparse.Namespace) -> str:
    return str(args.dsn or os.environ.get("LEASEGUARD_DSN", ""))


def open_session(
    args: argparse.Namespace,
    contract: "Contract",
    facts: dict[str, Any],
    intake: "IntakeAccess | None" = None,
) -> AbstractContextManager["GuardSession"]:
    """This host's session, or with --host-facts/--facts-file the fleet's (by the fleet rule)."""
    from leaseguard.core.contract import read_yaml
    from leaseguard.core.fleet import fleet_facts
    from leaseguard.orchestration.session import GuardSession, IntakeAccess, local_session

    password = os.environ.get("LEASEGUARD_CRON_PASSWORD")
    intake = intake or IntakeAccess(args.cron_database, args.cron_user, password)
    path, reports = args.facts_file, {}
    if path:
        data = read_yaml(path, what="facts file", kind="YAML/JSON")
        if not isinstance(data, dict) or not data:
            raise ConfigError(f"facts file {path} must map each host to its facts")
        for host, report in data.items():
            if not isinstance(report, dict):
                raise ConfigError(f"facts file {path}: host {host} must map to its facts")
            reports[str(host)] = report
    for text in args.host_facts or ():
        host, sep, values = text.partition("=")
        host, (timeout, _, started) = host.strip(), values.partition(",")
        if not sep or not host:
            raise ConfigError("--host-facts needs HOST=TIMEOUT_S[,STARTED_AT], e.g. app1=3600")
        if host in reports:
            raise ConfigError(f"host {host} is given more than once (--host-facts/--facts-file)")
        timeout, started = timeout.strip() or None, started.strip() or None
        reports[host] = {"task_timeout_s": timeout, "runtime_started_at": started}
    if not reports:
        return local_session(contract, resolve_dsn(args), intake=intake, **facts)
    if args.task_timeout_s is not None or args.runtime_started_at is not None:
        raise ConfigError(
            "--task-timeout-s/--runtime-started-at describe one host; with --host-facts or "
            "--facts-file give every host's facts there instead"
        )
    per_host = fleet_facts(reports, with_clocks=False)[0]
    return closing(GuardSession(contract, resolve_dsn(args), per_host, intake=intake))


def run_check(args: argparse.Namespace) -> int:
    with open_session(args, contract_from_args(args), given_facts(args)) as session:
        verdict = session.judge()
    print(json.dumps(verdict.as_dict()) if args.json else verdict.timeline())
    for warning in verdict.warnings:
        say(f"warning: {warning}")
    return verdict.exit_status


def add_status_command(parser: argparse.ArgumentParser) -> None:
    parser.description = """\
    Print the snapshot a drain started with --status-file PATH keeps up to date: state,
    host(s), decision so far, live/stale/orphaned/queued counts, the longest remaining lease,
    elapsed vs deadline, the intake it paused and its counters. Exit status: 0 the snapshot is
    available (the drain runs, or finished: see state and exit_status), 1 it is not (no file,
    unreadable, or stale: its writer is gone and the drain did not finish).
    """
    parser.add_argument("path", metavar="PATH", help="the drain's --status-file")
    parser.add_argument("--json", action="store_true", help="print the snapshot as JSON")


def run_status(args: argparse.Namespace) -> int:
    from leaseguard.orchestration.drain_status import read_status, status_line

    status = read_status(args.path)
    print(json.dumps(status) if args.json else status_line(status))
    return 0 if status["available"] else EXIT_FAILED


def report_failure(exc: LeaseguardError, *, as_json: bool, said: str = "") -> int:
    """Fail closed, loudly: the decision is 'failed', never 'proceed'; the exit status."""
    from leaseguard.orchestration.drain import failure_output

    print(failure_output(exc, socket.gethostname(), as_json=as_json, fab=False))
    say(said or f"check failed: {exc}")
    return EXIT_FAILED
