"""`drain`, `resume`, `budgets`, `index-sql`: loaded only when named, `check` never imports them."""

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from functools import partial

from leaseguard.adapters.budgets import converge_jobs
from leaseguard.adapters.db import connect, translate_errors
from leaseguard.adapters.indexing import index_advice, offline_advice
from leaseguard.adapters.pauses import scan_leftovers
from leaseguard.cli.main import (
    CRON_DATABASE_HELP,
    SECONDS,
    add_config_option,
    add_contract_options,
    add_cron_database_option,
    add_table_options,
    contract_from_args,
    given_facts,
    open_session,
    report_failure,
    resolve_dsn,
    say,
)
from leaseguard.core import errors
from leaseguard.core.budgets.config import format_budget, format_optional, load_budget_config
from leaseguard.core.budgets.planning import ON_DRIFT_CHOICES, Action
from leaseguard.core.contract import Contract, load_config_file
from leaseguard.orchestration import drain_run
from leaseguard.orchestration.drain import ActionOutcome, DrainResult, TerminalProgress, print_drain
from leaseguard.orchestration.intake import IntakeAccess, resume_lines, resume_pauses

log = logging.getLogger("leaseguard.drain")
# What a person reads for a job to write: before --apply, and after.
_PENDING = {Action.CREATE: "missing", Action.UPDATE: "differs"}
_DONE = {Action.CREATE: "created", Action.UPDATE: "updated"}


def add_resume_command(parser: argparse.ArgumentParser) -> None:
    parser.description = """\
    Reactivate exactly the pg_cron jobs that a drain paused and recorded (a drain killed before
    its resume, or whose resume could not reach the database), and delete their records. Jobs
    disabled without a drain have no record and are never touched. A hold whose holder still
    runs on this machine (same pid, same start time) is kept, and so is one taken on another
    machine (it cannot be checked from here): its action may be in its hold window. Both are
    named (state=kept); --force gives them back too, logged. Exit status: 0 done (also when
    nothing was recorded), 75 a hold was kept, 1 failed, 2 usage.
    """
    add_config_option(parser.add_argument_group("connection"))
    add_cron_database_option(parser)
    parser.add_argument(
        "--job",
        action="append",
        metavar="NAME",
        help="only this recorded job (repeatable; default: every recorded job)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="also give back holds whose holder still runs or cannot be checked (another "
        "machine): only once you know that run is gone",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_drain_command(parser: argparse.ArgumentParser) -> None:
    parser.description = """\
    Hold intake, then poll until no live lease remains or the deadline passes; intake is given
    back on every exit path. With `-- COMMAND [ARGS...]`, COMMAND runs once the drain proceeds,
    with intake still held, and intake is given back only after it exits: the verdict is still
    true while it runs. COMMAND gets the verdict as a JSON file ($LEASEGUARD_VERDICT_FILE) and
    runs in a session of its own: a signal ends it and its children before intake is given back.
    Exit status: 0 drained, 75 deadline reached with live leases, 1 failed, 2 usage; with a
    COMMAND, COMMAND's own exit status once it ran.
    """
    add_contract_options(parser)
    drain = parser.add_argument_group("drain")
    drain.add_argument(
        "--deadline-s",
        **SECONDS,
        help="give up after N seconds (default and maximum: the longest "
        "remaining lease seen at the start)",
    )
    drain.add_argument(
        "--poll-s", **SECONDS, help=f"seconds between polls (default {drain_run.DEFAULT_POLL_S:g})"
    )
    drain.add_argument(
        "--pause-cron-job",
        dest="pause_cron_jobs",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="pg_cron job(s) to deactivate during the drain and reactivate after",
    )
    add_cron_database_option(drain)
    drain.add_argument(
        "--resume-retry-s",
        **SECONDS,
        help="retry a failed resume with backoff for up to N seconds (default "
        f"{drain_run.DEFAULT_RESUME_RETRY_S:g}); then name the paused jobs and the command "
        "that resumes them",
    )
    for flag, what in {  # the commands' metavar is CMD, the files' PATH
        "--pause-command": "shell command that stops intake before waiting",
        "--resume-command": "shell command that restarts intake afterwards (always run)",
        "--status-file": "rewrite a JSON snapshot of the drain here after every poll "
        "(read it with `leaseguard status PATH`)",
        "--metrics-file": "rewrite Prometheus text metrics here after every poll "
        "(node_exporter textfile collector: name it *.prom)",
    }.items():
        drain.add_argument(flag, metavar="PATH" if flag.endswith("-file") else "CMD", help=what)
    drain.add_argument("-v", "--verbose", action="store_true", help="also log idle polls (DEBUG)")
    drain.add_argument(
        "command",
        nargs="*",
        metavar="-- COMMAND",
        help="run COMMAND [ARGS...] once drained, intake still held; its exit status is ours",
    )


def run_drain(args: argparse.Namespace) -> int:
    contract = contract_from_args(args)
    facts = given_facts(args)
    # Every `drain:` key but cron_password has its flag; one given wins over the --config file's.
    keys = drain_run.DrainOptions.__dataclass_fields__.keys() - {"cron_password"}
    given = {key: getattr(args, key) for key in keys if getattr(args, key) is not None}
    section = (load_config_file(args.config) if args.config else {}).get("drain") or {}
    if not isinstance(section, dict):
        raise errors.ConfigError(f"config file {args.config}: 'drain' must be a mapping")
    options = drain_run.drain_options(section | given)
    drain_run.configure_logging(verbose=args.verbose)
    board = options.board()
    stop = threading.Event()
    act = partial(run_command, args.command, stop) if args.command else None
    action = f"command {args.command[0]}" if args.command else "drain"
    progress = TerminalProgress(sys.stderr) if sys.stderr.isatty() else None
    result = None
    try:
        with (
            open_session(args, contract, facts, options.intake("leaseguard drain")) as session,
            drain_run.signals_set(stop, say),
        ):
            result = drain_run.drain_host(
                session, options, progress, board, stop=stop, act=act, action=action
            )
    except KeyboardInterrupt:  # Ctrl-C before the drain began: nothing was paused
        stop.set()
    except errors.LeaseguardError as exc:  # INTAKE STILL PAUSED among them
        if not board.rows:  # no drain began: the status file says failed, not running
            board.not_drained(socket.gethostname(), exc, stopped=stop.is_set())
        return report_failure(exc, as_json=args.json)
    if stop.is_set():
        if not board.rows:
            board.not_drained(socket.gethostname(), None, stopped=True)
        # A signal before the command ran interrupted the drain only.
        ran = f" (command {args.command[0]} interrupted)" if result and result.action else ""
        say(f"drain interrupted{ran}; intake was resumed")
        return errors.EXIT_FAILED
    assert result is not None
    print_drain(result, socket.gethostname(), say, as_json=args.json, fab=False)
    return result.exit_status


def run_command(argv: list[str], stop: threading.Event, result: DrainResult) -> ActionOutcome:
    """Run `argv` here with the verdict in $LEASEGUARD_VERDICT_FILE; its exit status is ours."""
    with tempfile.TemporaryDirectory(prefix="leaseguard-") as folder:
        verdict_file = os.path.join(folder, "verdict.json")
        with open(verdict_file, "w", encoding="utf-8") as out:
            json.dump(result.as_dict(), out)
        env = {**os.environ, "LEASEGUARD_VERDICT_FILE": verdict_file}
        log.info("intake held: running command %s", argv[0])
        try:
            # A session of its own: a signal ends the command's children with it (`sh -c
            # 'restart; migrate'`), never one left running once intake is given back.
            child = subprocess.Popen(argv, env=env, start_new_session=True)
        except OSError as exc:
            raise errors.CommandFailed(
                f"command {argv[0]} could not start ({type(exc).__name__}); intake is given back"
            ) from None
        with child:
            while child.poll() is None:
                if stop.wait(0.1):
                    _end_group(child, argv[0])
            status = child.wait()
    log.info("command %s exited %d; giving intake back", argv[0], status)
    return ActionOutcome(status, f"command {argv[0]} exited {status}")


def _end_group(child: subprocess.Popen[bytes], name: str) -> None:
    """SIGTERM to the command's process group, 0.25 s later SIGKILL; intake back once it is gone."""
    for sig, wait_s in ((signal.SIGTERM, 0.25), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(wait_s)
    gone_by = time.monotonic() + 5.0
    while time.monotonic() < gone_by:
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    log.warning("command %s: part of its process group outlived SIGKILL", name)


def run_resume(args: argparse.Namespace) -> int:
    password = os.environ.get("LEASEGUARD_CRON_PASSWORD")
    access = IntakeAccess(args.cron_database, args.cron_user, password)
    outcome = resume_pauses(resolve_dsn(args), access, jobs=args.job, force=args.force)
    print(json.dumps(outcome) if args.json else resume_lines(outcome))
    return errors.EXIT_DEFER if outcome["kept"] else errors.EXIT_PROCEED


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
            contextlib.nullcontext(conninfo),
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
    writable = partial(connect, conninfo, Contract.connect_timeout_s, writable=True)
    for warning in scan_leftovers(lambda: writable(dbname=args.cron_database)):
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
