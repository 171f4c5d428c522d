"""The hosts of one `fab` run, opened once, and the sessions that judge them: one per
database.

Each host is opened in parallel (its SSH connection, its tunnel to the database, its
lookups' one exec), at most MAX_PARALLEL_HOSTS at once. The judgment is then ONE query per
poll for every host of a database, over ONE connection to it: through the first host's
tunnel, falling over to the next host's when that one breaks. Every host is judged from the
first poll; a database sees one backend and one query per poll, whatever the fleet's size.

Which hosts share a database: a database address other than a loopback is one database
for every host. Reached at each host's own loopback (the default), it may be each
host's own, so each host's is identified once, over a short-lived connection through its
tunnel (the server's start time and the database's name), and hosts are grouped by it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from invoke.context import Context

from leaseguard.adapters.clock import offset_from_here
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.dsn import each_hosts_own
from leaseguard.core.errors import LeaseguardError
from leaseguard.core.verdict import Verdict
from leaseguard.fabric.fleet import for_each_host, say
from leaseguard.fabric.settings import FabricSettings, connection_to
from leaseguard.orchestration.session import GuardSession, fleet_session
from leaseguard.orchestration.ssh_session import ssh_session


@dataclass
class OpenedHosts:
    """The hosts that opened (their sessions: lookups done, tunnel up, no database
    connection yet) and those that failed, with why."""

    sessions: dict[str, GuardSession] = field(default_factory=dict)
    failed: dict[str, LeaseguardError] = field(default_factory=dict)
    clocks: dict[str, ClockOffset] = field(default_factory=dict)

    def paths(self) -> list[tuple[str, GuardSession]]:
        return sorted(self.sessions.items())


@contextlib.contextmanager
def opened_hosts(hosts: list[str], c: Context, settings: FabricSettings) -> Iterator[OpenedHosts]:
    """Every host opened in parallel; all closed (tunnels and SSH connections) at the end."""
    opened = OpenedHosts()
    with contextlib.ExitStack() as stack:
        # One host alone: its guard connection opens while its lookups run.
        alone = len(hosts) == 1
        for host, result in for_each_host(hosts, lambda h: _open(h, c, settings, alone)):
            if isinstance(result, LeaseguardError):
                opened.failed[host] = result
                continue
            session, clock, closing = result
            stack.enter_context(closing)
            opened.sessions[host] = session
            if clock is not None:
                opened.clocks[host] = clock
        yield opened


def _open(
    host: str, c: Context, settings: FabricSettings, connect: bool
) -> tuple[str, tuple[GuardSession, ClockOffset | None, contextlib.ExitStack] | LeaseguardError]:
    stack = contextlib.ExitStack()
    try:
        connection = connection_to(host, c, settings)
        stack.callback(connection.close)
        session = stack.enter_context(
            ssh_session(
                connection, settings.contract, settings.conninfo, settings.address, connect=connect
            )
        )
        # The host's clock minus ours, only when a start time makes it matter.
        clock = None
        if session.facts.runtime_started_at is not None:
            clock = session.judged.host_minus_here or offset_from_here(session.runner)
    except LeaseguardError as exc:
        stack.close()
        return host, exc
    except BaseException:
        stack.close()
        raise
    return host, (session, clock, stack)


def by_database(opened: OpenedHosts, settings: FabricSettings) -> list[list[str]]:
    """The opened hosts grouped by the database each reaches (see the module docstring); a
    host whose database could not be identified is moved to `opened.failed`."""
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
) -> Iterator[GuardSession]:
    """The one session judging `hosts` (default: every opened host; one database): each by
    its own facts (judge_each), or the fleet as one by the fleet rule (judge). Its paths are
    every such host's tunnel."""
    chosen = sorted(hosts or opened.sessions)
    (_, through), *others = [(h, opened.sessions[h]) for h in chosen]
    per_host = {host: opened.sessions[host].facts for host in chosen}
    fallbacks = [(s.conninfo, s.link) for _, s in others if s.link is not None]
    if fleet_rule:
        with fleet_session(
            settings.contract,
            through.conninfo,
            per_host,
            runner=through.runner,
            link=through.link,
            host_offsets=opened.clocks,
            fallbacks=fallbacks,
        ) as session:
            _take_over(session, through, settings)
            yield session
        return
    session = GuardSession(
        settings.contract,
        through.conninfo,
        per_host,
        through.runner,
        through.link,
        label="fleet",
        host_offsets=opened.clocks,
        fallbacks=fallbacks,
        host_labels={host: opened.sessions[host].host for host in chosen},
    )
    _take_over(session, through, settings)
    try:
        yield session
    finally:
        session.close()


def _take_over(session: GuardSession, through: GuardSession, settings: FabricSettings) -> None:
    """The judging session's intake identity, and the connection its first path's host
    opened already (one host alone), if any."""
    if (opened := through.handover()) is not None:
        session.adopt(opened)
    drain = settings.drain
    session.cron_database = drain.cron_database
    session.cron_user, session.cron_password = drain.cron_user, drain.cron_password


def not_judged(hosts: list[str], cause: LeaseguardError) -> dict[str, LeaseguardError]:
    """The fleet's one judgment failed: its cause said once, each host not judged by it
    (a fleet of one host: the failure is that host's own)."""
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
