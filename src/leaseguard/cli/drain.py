"""`leaseguard drain`, `resume`, `status` (loaded by name only when used, see COMMANDS)."""

from __future__ import annotations

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
from collections.abc import Callable

from leaseguard.cli.main import (
    SECONDS,
    add_config_option,
    add_contract_options,
    add_cron_database_option,
    contract_from_args,
    given_facts,
    open_session,
    report_failure,
    resolve_dsn,
    say,
)
from leaseguard.core import errors
from leaseguard.orchestration.drain import ActionOutcome, DrainResult, drain_lines, progress_for

log = logging.getLogger("leaseguard.drain")


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
    return errors.EXIT_PROCEED if status["available"] else errors.EXIT_FAILED


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
    from leaseguard.orchestration.drain_run import DEFAULT_POLL_S, DEFAULT_RESUME_RETRY_S

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
        "--poll-s", **SECONDS, help=f"seconds between polls (default {DEFAULT_POLL_S:g})"
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
        f"{DEFAULT_RESUME_RETRY_S:g}); then name the paused jobs and the command that resumes them",
    )
    drain.add_argument(
        "--pause-command", metavar="CMD", help="shell command that stops intake before waiting"
    )
    drain.add_argument(
        "--resume-command",
        metavar="CMD",
        help="shell command that restarts intake afterwards (always run)",
    )
    drain.add_argument(
        "--status-file",
        metavar="PATH",
        help="rewrite a JSON snapshot of the drain here after every poll "
        "(read it with `leaseguard status PATH`)",
    )
    drain.add_argument(
        "--metrics-file",
        metavar="PATH",
        help="rewrite Prometheus text metrics here after every poll "
        "(node_exporter textfile collector: name it *.prom)",
    )
    drain.add_argument("-v", "--verbose", action="store_true", help="also log idle polls (DEBUG)")
    drain.add_argument(
        "command",
        nargs="*",
        metavar="-- COMMAND",
        help="run COMMAND [ARGS...] once drained, intake still held; its exit status is ours",
    )


def run_drain(args: argparse.Namespace) -> int:
    from leaseguard.core.contract import load_config_file
    from leaseguard.orchestration import drain_run

    contract = contract_from_args(args)
    facts = given_facts(args)
    # Every `drain:` key but cron_password has its flag; one given wins over the --config file's.
    keys = drain_run.DrainOptions.__dataclass_fields__.keys() - {"cron_password"}
    given = {key: getattr(args, key) for key in keys if getattr(args, key) is not None}
    # The --config file's `drain:` section, as fabric.yaml's.
    section = (load_config_file(args.config) if args.config else {}).get("drain") or {}
    if not isinstance(section, dict):
        raise errors.ConfigError(f"config file {args.config}: 'drain' must be a mapping")
    options = drain_run.drain_options(section | given)
    drain_run.configure_logging(verbose=args.verbose)
    board = drain_run.status_board(options)
    started: list[str] = []  # the command's name, once it runs
    stop = threading.Event()
    result = None
    try:
        with (
            open_session(args, contract, facts, options.intake("leaseguard drain")) as session,
            drain_run.signals_set(stop, say),
        ):
            result = drain_run.drain_host(
                session,
                options,
                progress_for(sys.stderr),
                board,
                stop=stop,
                act=command_action(args.command, started, stop) if args.command else None,
                action=f"command {args.command[0]}" if args.command else "drain",
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
        ran = f" (command {args.command[0]} interrupted)" if started else ""
        say(f"drain interrupted{ran}; intake was resumed")
        return errors.EXIT_FAILED
    assert result is not None
    for to_stdout, line in drain_lines(result, socket.gethostname(), as_json=args.json, fab=False):
        if to_stdout:
            print(line)
        else:
            say(line)
    return result.exit_status


def command_action(
    argv: list[str], started: list[str], stop: threading.Event
) -> Callable[[DrainResult], ActionOutcome]:
    """Run `argv` here with the verdict in $LEASEGUARD_VERDICT_FILE; its exit status is ours
    (`started` gets its name once it runs: a signal before then interrupted no command)."""

    def run(result: DrainResult) -> ActionOutcome:
        with tempfile.TemporaryDirectory(prefix="leaseguard-") as folder:
            verdict_file = os.path.join(folder, "verdict.json")
            with open(verdict_file, "w", encoding="utf-8") as out:
                json.dump(result.as_dict(), out)
            env = {**os.environ, "LEASEGUARD_VERDICT_FILE": verdict_file}
            started.append(argv[0])
            log.info("intake held: running command %s", argv[0])
            try:
                # A session of its own: a signal ends the command's children with it (`sh -c
                # 'restart; migrate'`), never one left running once intake is given back.
                child = subprocess.Popen(argv, env=env, start_new_session=True)
            except OSError as exc:
                raise errors.CommandFailed(
                    f"command {argv[0]} could not start ({type(exc).__name__}); "
                    "intake is given back"
                ) from None
            with child:
                while child.poll() is None:
                    if stop.wait(0.1):
                        _end_group(child, argv[0])
                status = child.wait()
        log.info("command %s exited %d; giving intake back", argv[0], status)
        return ActionOutcome(status, f"command {argv[0]} exited {status}")

    return run


def _end_group(child: subprocess.Popen[bytes], name: str) -> None:
    """SIGTERM to the command's process group, a quarter second, then SIGKILL to all of it;
    intake is given back only once none of it is left (at most 5 s more)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(0.25)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    gone_by = time.monotonic() + 5.0
    while time.monotonic() < gone_by:
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    log.warning("command %s: part of its process group outlived SIGKILL", name)


def run_resume(args: argparse.Namespace) -> int:
    from leaseguard.orchestration.intake import resume_lines, resume_pauses

    outcome = resume_pauses(
        resolve_dsn(args),
        cron_database=args.cron_database,
        jobs=args.job,
        user=args.cron_user,
        password=os.environ.get("LEASEGUARD_CRON_PASSWORD"),
        force=args.force,
    )
    print(json.dumps(outcome) if args.json else resume_lines(outcome))
    return errors.EXIT_DEFER if outcome["kept"] else errors.EXIT_PROCEED
