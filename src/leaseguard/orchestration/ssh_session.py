"""One host's guard session: its lookups, and the database through a tunnel to the host
(apart from orchestration.session, so that `leaseguard check` never imports Fabric)."""

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, closing, contextmanager
from typing import Any

from leaseguard.adapters import db, ssh
from leaseguard.adapters.runtime import Runner, look_up_host
from leaseguard.core.contract import Contract
from leaseguard.core.errors import DatabaseUnavailable, LeaseguardError
from leaseguard.core.fleet import fleet_facts, host_report
from leaseguard.core.lookups import parse_timeout_s, parse_timestamp
from leaseguard.orchestration.drain import DrainResult
from leaseguard.orchestration.drain_run import DrainOptions, drain_each, shared_failures
from leaseguard.orchestration.session import GuardSession, IntakeAccess

# A database path: the conninfo to connect with, and the tunnel it goes through (or None).
Path = AbstractContextManager[tuple[str, ssh.DatabaseTunnel | None]]


@contextmanager
def host_session(
    contract: Contract,
    runner: Runner,
    path: Path,
    *,
    connect: bool = True,
    intake: IntakeAccess | None = None,
    **given: Any,
) -> Iterator[GuardSession]:
    """A host's session: its lookups on a thread while `path` (and, `connect`, the guard's
    connection) opens; failures raised in order: the path's, the lookups', the connection's."""
    with ThreadPoolExecutor(1, thread_name_prefix="leaseguard-lookup") as thread:
        lookup = thread.submit(look_up_host, contract, runner, **given)
        with path as (conninfo, tunnel):
            try:
                early = db.connect(conninfo, contract.connect_timeout_s) if connect else None
            except LeaseguardError as exc:
                lookup.result()  # a lookup's failure is raised first
                if isinstance(exc, DatabaseUnavailable) and tunnel is not None:
                    exc = tunnel.failure() or exc  # named by the tunnel's cause, if it has one
                raise exc from None
            try:
                facts, clock = lookup.result()
                session = GuardSession(
                    contract,
                    conninfo,
                    facts,
                    runner,
                    tunnel,
                    host_minus_here=clock,
                    intake=intake,
                    conn=early,
                )
            except BaseException:
                if early is not None:
                    early.close()
                raise
            with closing(session):
                yield session


@contextmanager
def task_session(
    contract: Contract,
    runner: Runner,
    path: Path,
    intake: IntakeAccess,
    given: dict[str, Any],
    *,
    lookups: dict[str, Any] | None = None,
    hosts: tuple[str, ...] = (),
    each: bool = False,
) -> Iterator[GuardSession]:
    """An Ansible task's session: this host's (`given` facts), or `hosts` by their `lookups`."""
    if lookups is None:  # explicit values win over a registered task_timeout `lookup`
        lookup = given["lookup"] or {}
        seconds, what, source = given["task_timeout_s"], "task_timeout_s", None
        if seconds is None and lookup.get("task_timeout_s") is not None:
            seconds, what = lookup["task_timeout_s"], "lookup.task_timeout_s"
            source = lookup.get("source")
        # The core's strict parsers, never float(): a message never repeats a (maybe secret) value.
        timeout = None if seconds is None else parse_timeout_s(seconds, what=what)
        started = given["runtime_started_at"] or lookup.get("runtime_started_at")
        started_at = parse_timestamp(started, what="runtime_started_at") if started else None
        replicas = [str(name) for name in lookup.get("replicas") or ()]
        facts: dict[str, Any] = {"task_timeout_source": source, "replicas": replicas}
        facts.update(task_timeout_s=timeout, runtime_started_at=started_at)
        with host_session(contract, runner, path, intake=intake, **facts) as session:
            yield session
        return
    # A host of `hosts` whose registered lookup is missing, failed or skipped fails, named.
    reports = {h: lookups.get(h) for h in hosts} if each else lookups
    by_host, clocks = fleet_facts(reports, hosts, given_source="lookup")
    with path as (conninfo, link):
        session = GuardSession(
            contract, conninfo, by_host, runner, link, each=each, host_offsets=clocks, intake=intake
        )
        with closing(session):
            yield session


def lookup_report(contract: Contract, runner: Runner) -> dict[str, Any]:
    """A host looked up (its clock read with the first lookup), as task_timeout returns it."""
    return {"changed": False, **host_report(*look_up_host(contract, runner))}


def drain_every_host(
    session: GuardSession, options: DrainOptions, stop: threading.Event
) -> dict[str, DrainResult]:
    """Each host of an each_host session drained; a failure of the fleet's poll fails them all."""
    drained = drain_each(session, options, stop=stop)
    for cause in shared_failures(drained):
        raise type(cause)(f"the fleet's judgment failed ({cause.kind}): {cause}")
    return drained


def decisions_summary(decisions: Iterable[str]) -> tuple[str, str]:
    """How many hosts got each decision ('defer 1, proceed 19'), and the worst of them."""
    counts = Counter(decisions)
    summary = ", ".join(f"{decision} {n}" for decision, n in sorted(counts.items()))
    return summary, next((d for d in ("failed", "defer") if counts[d]), "proceed")
