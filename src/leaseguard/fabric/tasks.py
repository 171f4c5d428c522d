"""Fabric tasks `guard`, `drain` and `resume`: a thin front over the core.

`fab -H app1,app2 guard` checks all hosts in parallel and exits once, with the worst
status (1 if any check failed, else 75 if any host defers, else 0). Fabric itself would
run a task once per host, serially; the fleet executor (leaseguard.fabric.fleet) hands our
tasks the whole host list instead, and is installed through this collection.
"""

from __future__ import annotations

from typing import Any

from fabric import Executor
from invoke.collection import Collection
from invoke.exceptions import Exit, ParseError

from leaseguard.core.errors import EXIT_USAGE
from leaseguard.fabric.drain_task import drain
from leaseguard.fabric.fleet import FleetExecutor
from leaseguard.fabric.guard_task import guard
from leaseguard.fabric.resume_task import resume
from leaseguard.fabric.settings import CONNECTION_KEYS, env_defaults, settings_from_config


def collection() -> Collection:
    """The task collection a fabfile exposes: `ns = collection()`.

    Also hands the running `fab` program the fleet executor. A collection's own config is
    merged only after the executor is chosen, so `tasks.executor_class` there would come
    too late; a user's fabric.yaml may still set it explicitly.

    Its config names every `leaseguard:` key, unset, so that `FABRIC_LEASEGUARD_*`
    environment variables reach them (invoke loads them after the collection's config).
    """
    _use_fleet_executor()
    ns = Collection(guard, drain, resume)
    ns.configure(env_defaults())
    return ns


def _use_fleet_executor() -> None:
    import fabric.main

    program = getattr(fabric.main, "program", None)
    if program is None:
        return
    if program.executor_class is Executor:
        program.executor_class = FleetExecutor
    _usage_errors_exit_2(program)


def _usage_errors_exit_2(program: Any) -> None:
    """A flag or task invoke cannot parse (`guard --bogus`, `--bogus guard`, a task name, a
    task flag's missing value) exits 2.

    invoke exits 1 on a ParseError, which reads as "the check failed". Its first pass over
    the command line takes only the flags it knows and leaves everything else, unknown flags
    before the task name included, to parse_tasks, which runs after the fabfile loads; so
    wrapping the running program's parse_tasks here turns those errors into usage errors.
    Only a core flag's own bad value (`fab -H` with nothing after it) fails in that first
    pass, before any fabfile exists, and keeps invoke's status (README, "Exit codes").
    """
    parse_tasks = program.parse_tasks
    if getattr(parse_tasks, "leaseguard_usage", False):
        return

    def parse_tasks_or_usage() -> None:
        try:
            parse_tasks()
        except ParseError as exc:
            hint = _did_you_mean(str(exc), program)
            raise Exit(
                f"{exc}{hint} (see fab --list, or fab --help TASK)", code=EXIT_USAGE
            ) from None

    parse_tasks_or_usage.leaseguard_usage = True  # type: ignore[attr-defined]
    program.parse_tasks = parse_tasks_or_usage


def _did_you_mean(message: str, program: Any) -> str:
    """ "; did you mean 'guard'?" for invoke's "No idea what 'gaurd' is!", from the
    collection's task names and their flags."""
    import difflib
    import re

    unknown = re.match(r"No idea what '([^']+)' is!", message)
    collection = getattr(program, "collection", None)
    if unknown is None or collection is None:
        return ""
    word = unknown.group(1).partition("=")[0]
    known = list(collection.task_names)
    for name in collection.task_names:
        for argument in collection[name].get_arguments():
            known += [f"--{n}" if len(n) > 1 else f"-{n}" for n in argument.names]
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


__all__ = [
    "CONNECTION_KEYS",
    "FleetExecutor",
    "collection",
    "drain",
    "guard",
    "resume",
    "settings_from_config",
]
