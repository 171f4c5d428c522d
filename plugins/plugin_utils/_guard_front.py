# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the Ansible front over the leaseguard core.

Task arguments and the host's inventory connection settings become the core's inputs; its
verdicts and errors become task results. The judgment itself is the core's.
"""

from __future__ import annotations

from contextlib import closing, contextmanager

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import (  # pylint: disable=unused-import
    ConfigError,  # noqa: F401 (action/cron_budget.py imports it from here)
    api,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    AnsibleRunner,
    conninfo_from,
    database_path,
)


def contract_from(args):
    """The contract from the task's contract options (top-level keys of the core's, so a key
    added there needs no change here), without the None the argument spec fills in."""
    keys = {key.split(".")[0] for key in api.CONFIG_KEYS}
    return api.load_contract(
        {key: _without_none(args[key]) for key in keys if args.get(key) is not None}
    )


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def failure(exc, host, what="check"):
    """A failed lookup or check fails the task; a check's decision is 'failed', never 'proceed'."""
    result = {
        **api.failure_result(exc, host),
        "failed": True,
        "changed": False,
        "msg": f"leaseguard: {what} failed on {host} ({exc.kind}): {exc}",
    }
    if what != "check":
        del result["decision"]  # a lookup decides nothing
    return result


def lookup_result(facts, clock=None):
    """task_timeout's result: the host's report (its clock minus the controller's with it)."""
    return {"changed": False, **api.host_report(facts, clock)}


def _clock(runner, facts):
    """The host's clock minus the controller's, when a start time makes it matter."""
    return api.offset_from_here(runner) if facts.runtime_started_at is not None else None


def look_up_facts(contract, runner, **given):
    """Every lookup and the host's clock reading in one exec on the host.

    Except through become, whose tty merges the two streams that exec's output is split by:
    there each lookup is its own exec and the clock is read after them (a registered `lookup`
    must carry it, or a fleet judgment from it fails).
    """
    if runner.becomes:
        facts = api.resolve_runtime_facts(contract, runner, **given)
        return api.HostLookup(facts, _clock(runner, facts))
    return api.look_up_host(contract, runner, **given)


def look_up(runner, contract):
    """task_timeout's result."""
    looked_up = look_up_facts(contract, runner)
    return lookup_result(looked_up.facts, looked_up.clock or _clock(runner, looked_up.facts))


def host_lookup(session):
    """A one-host session's facts and clock reading, as task_timeout returns them."""
    return lookup_result(session.facts, session.judged.host_minus_here)


def fleet_facts(lookups, hosts):
    """Every host's facts and clock minus ours from its registered lookup; a host of `hosts`
    that is missing, failed, was skipped or unreachable fails, named."""
    return api.fleet_facts(lookups, hosts, given_source="lookup")


def given_facts(args):
    """Facts the task passes in (explicit options win over a registered `lookup`)."""
    lookup = args.get("lookup") or {}
    seconds = args.get("task_timeout_s")
    source = None
    if seconds is None and lookup.get("task_timeout_s") is not None:
        seconds, source = float(lookup["task_timeout_s"]), lookup.get("source")
    if seconds is not None:
        seconds = api.parse_timeout_s(seconds, what="task_timeout_s")
    started = args.get("runtime_started_at") or lookup.get("runtime_started_at")
    return {
        "task_timeout_s": seconds,
        "task_timeout_source": source,
        "runtime_started_at": api.parse_timestamp(started, what="runtime_started_at")
        if started
        else None,
        "replicas": [str(name) for name in lookup.get("replicas") or ()],
    }


@contextmanager
def guard_session(action, args, contract, facts, label):
    """This host's session, its lookups run through the task's connection.

    The lookups' one exec runs in a thread while the tunnel and the guard's connection open
    (as `fab guard` does); failures are still reported in step order: the tunnel's, the
    lookups', the connection's. The tunnel is the session's link, reopened after a partition.
    """
    runner = AnsibleRunner(action, label)
    lookup = api.Background(look_up_facts, contract, runner, **facts)
    try:
        with database_path(action, args, probe=False) as (conninfo, tunnel):
            early = api.connect_early(contract, conninfo, tunnel)
            looked_up, opened = api.await_lookup(lookup.result, early)
            session = api.GuardSession(
                contract, conninfo, looked_up.facts, runner, tunnel, host_minus_here=looked_up.clock
            )
            session.adopt(opened)
            with closing(session):
                yield session
    finally:
        lookup.join()


@contextmanager
def fleet_guard_session(action, args, contract, lookups, hosts, label, each=False):
    """One session through this host's database path judging every host of `hosts`: once by
    the fleet rule, or with `each` each host by its own facts (one query per poll)."""
    if each:
        lookups = {host: lookups.get(host) for host in hosts}
    per_host, offsets = fleet_facts(lookups, hosts)
    with database_path(action, args) as (conninfo, tunnel):
        runner = AnsibleRunner(action, label)
        if each:
            session = api.GuardSession(
                contract, conninfo, per_host, runner, tunnel, label="fleet", host_offsets=offsets
            )
            opened = closing(session)
        else:
            opened = api.fleet_session(
                contract, conninfo, per_host, runner=runner, link=tunnel, host_offsets=offsets
            )
        with opened as session:
            yield session


def shares_one_database(action, args):
    """Whether every host reaches one database the way this task does: directly from the
    controller, or through a tunnel to an address other than each host's own loopback."""
    transport = str(getattr(action._connection, "transport", "") or "").rsplit(".", 1)[-1]
    if not args["tunnel"] or transport == "local":
        return True
    far_end = api.tunnel_far_end(conninfo_from(args), args["db_host"], args["db_port"])[0]
    return not api.each_hosts_own(far_end)
