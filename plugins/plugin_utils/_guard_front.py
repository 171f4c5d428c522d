# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the Ansible front over the leaseguard core.

Task arguments and the host's inventory connection settings become the core's inputs; its
verdicts and errors become task results. The judgment itself is the core's.
"""

from __future__ import annotations

from contextlib import closing, contextmanager

from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import api
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    AnsibleRunner,
    conninfo_from,
    database_path,
    tunnels,
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


def look_up(runner, contract):
    """task_timeout's result: the lookups and the clock in one exec (one each through become)."""
    looked_up = api.look_up_host(contract, runner)
    return lookup_result(looked_up.facts, looked_up.clock)


def host_lookup(session):
    """A one-host session's facts and clock reading, as task_timeout returns them."""
    return lookup_result(session.facts, session.judged.host_minus_here)


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


def guard_session(action, args, host, task_vars, intake):
    """The task's session. This host's: its lookups run through the task's connection while
    the tunnel and the guard's connection open, as `fab guard`'s do. With fleet_lookups, one
    session through this host's path judging every host of the play by the fleet rule, or
    with each_host each host of the batch by its own facts (one query per poll)."""
    contract, runner = contract_from(args), AnsibleRunner(action, host)
    lookups, each = args["fleet_lookups"], args["each_host"]
    if lookups is None:
        path = database_path(action, args, probe=False)
        return api.host_session(contract, runner, path, intake=intake, **given_facts(args))
    hosts = task_vars.get("ansible_play_batch" if each else "ansible_play_hosts_all", ())
    # A host of `hosts` whose registered lookup is missing, failed or skipped fails, named.
    reports = {h: lookups.get(h) for h in hosts} if each else lookups
    per_host, offsets = api.fleet_facts(reports, hosts, given_source="lookup")
    return _fleet_session(action, args, contract, runner, per_host, offsets, each, intake)


@contextmanager
def _fleet_session(action, args, contract, runner, per_host, offsets, each, intake):
    with database_path(action, args) as (conninfo, tunnel):
        given = {"host_offsets": offsets, "intake": intake}
        if each:
            session = api.GuardSession(
                contract, conninfo, per_host, runner, tunnel, label="fleet", **given
            )
            opened = closing(session)
        else:
            opened = api.fleet_session(
                contract, conninfo, per_host, runner=runner, link=tunnel, **given
            )
        with opened as session:
            yield session


def shares_one_database(action, args):
    """Whether every host reaches one database the way this task does: directly from the
    controller, or through a tunnel to an address other than each host's own loopback."""
    if not tunnels(action, args):
        return True
    far_end = api.tunnel_far_end(conninfo_from(args), args["db_host"], args["db_port"])[0]
    return not api.each_hosts_own(far_end)
