"""The hosts of one `fab` run, opened once in parallel (SSH, tunnel, its lookups' one exec),
and the sessions judging them: ONE query per poll for every host of a database, over ONE
connection through the first host's tunnel, falling over to the next host's; `fab guard` and
`fab resume` themselves.

At each host's own loopback (the default) the database may be each host's own: each is
identified once (server start time and database name) and the hosts grouped by it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.adapters.ssh import tunnelled
from leaseguard.core.dsn import each_hosts_own
from leaseguard.core.errors import EXIT_FAILED, LeaseguardError
from leaseguard.core.fleet import combine_facts, fleet_facts, host_report
from leaseguard.core.verdict import Verdict, failure_result
from leaseguard.fabric.fleet import exit_with_worst, failure_line, fleet_hosts, for_each_host, say
from leaseguard.fabric.settings import FabricSettings, connection_to, settings_or_exit
from leaseguard.orchestration.session import GuardSession, IntakeAccess
from leaseguard.orchestration.ssh_session import ssh_session


def guard_hosts(c: Context, json_: bool) -> None:
    """`fab guard`: every host's verdict (or failure), in -H order, and the worst status."""
    settings = settings_or_exit(c)
    hosts = fleet_hosts(c)
    with opened_hosts(list(dict.fromkeys(hosts)), c, settings) as opened:
        judged = judge_opened(opened, settings)
    outcomes = [(host, judged[host]) for host in hosts]  # a host named twice: twice
    if json_:
        dicts = [
            r.as_dict() if isinstance(r, Verdict) else failure_result(r, h) for h, r in outcomes
        ]
        print(json.dumps(dicts))
    else:
        for host, result in outcomes:
            if isinstance(result, Verdict):
                print(result.timeline())
                for warning in result.warnings:
                    print(f"leaseguard: warning: {warning}", file=sys.stderr)
            else:
                print(failure_line(host, result))
    exit_with_worst([result.exit_status for _, result in outcomes])


def resume_through_first(c: Context, json_: bool, jobs: list[str] | None) -> None:
    """`fab resume`: the pauses a drain recorded, given back through the first host."""
    from leaseguard.adapters.resume import resume_lines, resume_pauses

    settings = settings_or_exit(c)
    host = fleet_hosts(c)[0]
    connection = connection_to(host, c, settings)
    try:
        with tunnelled(connection, settings.conninfo, settings.address) as (conninfo, _):
            outcome = resume_pauses(
                conninfo,
                cron_database=settings.drain.cron_database,
                user=settings.drain.cron_user,
                password=settings.drain.cron_password,
                jobs=list(jobs or []) or None,
                connect_timeout_s=settings.contract.connect_timeout_s,
            )
    except LeaseguardError as exc:
        print(json.dumps(failure_result(exc, host)) if json_ else failure_line(host, exc))
        raise Exit(code=EXIT_FAILED) from None
    print(json.dumps(outcome) if json_ else resume_lines(outcome))


@dataclass
class OpenedHosts:
    """The hosts that opened (lookups done, tunnel up) and those that failed, with why."""

    sessions: dict[str, GuardSession] = field(default_factory=dict)
    failed: dict[str, LeaseguardError] = field(default_factory=dict)


@contextlib.contextmanager
def opened_hosts(hosts: list[str], c: Context, settings: FabricSettings) -> Iterator[OpenedHosts]:
    """Every host opened in parallel; all closed (tunnels and SSH connections) at the end.
    One host alone opens its guard connection while its lookups run."""
    opened = OpenedHosts()
    with contextlib.ExitStack() as stack:
        alone = len(hosts) == 1
        for host, result in for_each_host(hosts, lambda h: _open(h, c, settings, alone)):
            if isinstance(result, LeaseguardError):
                opened.failed[host] = result
                continue
            session, closing = result
            stack.enter_context(closing)
            opened.sessions[host] = session
        yield opened


def _open(
    host: str, c: Context, settings: FabricSettings, connect: bool
) -> tuple[str, tuple[GuardSession, contextlib.ExitStack] | LeaseguardError]:
    path = (settings.contract, settings.conninfo, settings.address)
    with contextlib.ExitStack() as stack:
        try:
            connection = connection_to(host, c, settings)
            session = stack.enter_context(ssh_session(connection, *path, connect=connect))
        except LeaseguardError as exc:
            return host, exc
        return host, (session, stack.pop_all())


def by_database(opened: OpenedHosts, settings: FabricSettings) -> list[list[str]]:
    """The opened hosts grouped by database (module docstring); a host whose database could
    not be identified is moved to `opened.failed`."""
    hosts = sorted(opened.sessions)
    if not each_hosts_own(settings.address.host) or len(hosts) == 1:
        return [hosts]
    groups: dict[object, list[str]] = {}
    for host, identity in for_each_host(hosts, lambda h: (h, _identity(opened.sessions[h]))):
        if isinstance(identity, LeaseguardError):
            opened.failed[host] = identity
            del opened.sessions[host]
        else:
            groups.setdefault(identity, []).append(host)
    return list(groups.values())


def _identity(session: GuardSession) -> tuple[object, ...] | LeaseguardError:
    try:
        return session.database_identity()
    except LeaseguardError as exc:
        return exc


@contextlib.contextmanager
def judging_session(
    opened: OpenedHosts,
    settings: FabricSettings,
    *,
    fleet_rule: bool = False,
    hosts: list[str] | None = None,
    intake: IntakeAccess | None = None,
) -> Iterator[GuardSession]:
    """The one session judging `hosts` (default: all; one database), each by its own facts
    or, with `fleet_rule`, as one; its paths are every such host's tunnel."""
    chosen = {host: opened.sessions[host] for host in sorted(hosts or opened.sessions)}
    through, *others = chosen.values()
    # Each host's facts and clock (read by its lookups' exec), as every front passes them.
    per_host, offsets = fleet_facts(
        {host: host_report(s.facts, s.judged.host_minus_here) for host, s in chosen.items()}
    )
    session = GuardSession(
        settings.contract,
        through.conninfo,
        combine_facts(per_host) if fleet_rule else per_host,
        through.runner,
        through.link,
        label="fleet",
        host_offsets=offsets,
        fallbacks=[(s.conninfo, s.link) for s in others if s.link is not None],
        host_labels={host: s.host for host, s in chosen.items()},
        intake=intake or settings.drain.intake(),
    )
    with contextlib.closing(session):
        # The connection one host alone opened already, if any.
        if (early := through.handover()) is not None:
            session.adopt(early)
        yield session


def not_judged(hosts: list[str], cause: LeaseguardError) -> dict[str, LeaseguardError]:
    """The fleet's one judgment failed: its cause said once, each host not judged by it
    (one host alone: the failure is its own)."""
    if len(hosts) == 1:
        return {hosts[0]: cause}
    say(f"the fleet's judgment failed ({cause.kind}): {cause}")
    return {
        host: type(cause)(
            f"host {host} was not judged: the fleet's judgment failed ({cause.kind}), "
            "its cause named once above"
        )
        for host in hosts
    }


def judge_opened(
    opened: OpenedHosts, settings: FabricSettings
) -> dict[str, Verdict | LeaseguardError]:
    """Every host's verdict (each by its own facts) from one query, or why it has none."""
    groups = by_database(opened, settings) if opened.sessions else []
    outcomes: dict[str, Verdict | LeaseguardError] = dict(opened.failed)
    for hosts in groups:
        try:
            with judging_session(opened, settings, hosts=hosts) as session:
                outcomes.update(session.judge_each())
        except LeaseguardError as exc:
            outcomes.update(not_judged(hosts, exc))
    return outcomes
