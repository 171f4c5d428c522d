# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Private to leaseguard.deploy: the Ansible front over the leaseguard core.

Action plugins run on the controller. They translate task arguments and the host's own
inventory connection settings into the core's inputs, and the core's verdicts and errors
into task results. No judgment happens here: that is `leaseguard.adapters.guard`, shared with the
CLI and the Fabric tasks.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._core import CARRIED
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._host_paths import (
    AnsibleRunner,
    conninfo_from,
    database_path,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._install_check import (
    install_hint,
    install_warnings,
)

try:
    from leaseguard.api import (
        CONFIG_KEYS,
        Background,
        ClockOffset,
        ConfigError,
        GuardSession,
        HostLookup,
        LeaseguardError,
        LookupFailed,
        await_lookup,
        connect_early,
        drain_each,
        drain_host,
        drain_options,
        each_hosts_own,
        facts_from_reports,
        failure_result,
        fleet_session,
        intake_line,
        load_contract,
        look_up_host,
        offset_from_here,
        parse_timeout_s,
        parse_timestamp,
        resolve_runtime_facts,
        shared_failures,
        tunnel_far_end,
    )
except ImportError as exc:  # the controller's Python lacks the leaseguard package
    LEASEGUARD_IMPORT_ERROR = exc

    class LeaseguardError(Exception):  # type: ignore[no-redef]
        """Stand-in so the plugins import; require_leaseguard() fails every task first."""

    ConfigError = LookupFailed = LeaseguardError
    drain_each = drain_host = drain_options = intake_line = shared_failures = None
    CONFIG_KEYS = frozenset()
else:
    LEASEGUARD_IMPORT_ERROR = None

# The task options that are contract keys: the core's top-level keys ("lease.multiplier" ->
# "lease"), so a key added to the contract needs no change here.
CONTRACT_KEYS = tuple(sorted({key.split(".")[0] for key in CONFIG_KEYS}))

display = Display()


def require_leaseguard():
    """Fail the task with install guidance when the core is missing on the controller.

    Also warns when the running collection and the installed core differ (_install_check).
    """
    if LEASEGUARD_IMPORT_ERROR is not None:
        exc = LEASEGUARD_IMPORT_ERROR
        # The Galaxy tarball carries the core: only its requirements can be missing.
        missing = (
            "the Python requirements of leaseguard.deploy are"
            if CARRIED
            else ("the leaseguard Python package is")
        )
        raise AnsibleActionFail(
            f"{missing} required on the controller "
            f"({type(exc).__name__}: {exc}): install them into the Python that runs ansible "
            f"({sys.executable}) with: {install_hint()}",
            orig_exc=exc,
        )
    for warning in install_warnings():
        display.warning(f"leaseguard: {warning}")


def contract_layer(args):
    """The contract keys the task set, without the None that argument specs fill in."""
    return {key: _without_none(args[key]) for key in CONTRACT_KEYS if args.get(key) is not None}


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def contract_from(args):
    return load_contract(contract_layer(args))


def failure(exc, host, what="check"):
    """A failed lookup or check fails the task; a check's decision is 'failed', never 'proceed'."""
    result = {
        **failure_result(exc, host),
        "failed": True,
        "changed": False,
        "msg": f"leaseguard: {what} failed on {host} ({exc.kind}): {exc}",
    }
    if what != "check":
        del result["decision"]  # a lookup decides nothing
    return result


def lookup_result(facts, clock=None):
    """task_timeout's result: the one value and its provenance, never the environment.

    `clock` (the host's clock minus the controller's) lets a fleet judgment run from
    another host still widen the orphan tolerance by this host's clock offset.
    """
    timeout = facts.task_timeout
    started = facts.runtime_started_at
    result = {
        "changed": False,
        "task_timeout_s": timeout.seconds if timeout else None,
        "source": timeout.source if timeout else None,
        "assumed": timeout.assumed if timeout else False,
        "runtime_started_at": started.isoformat() if started else None,
        "runtime_started_epoch_s": started.timestamp() if started else None,
        "warnings": list(facts.warnings),
        "replicas": list(facts.replicas),
    }
    if clock is not None and started is not None:
        result["clock"] = {"offset_s": clock.offset_s, "uncertainty_s": clock.uncertainty_s}
    return result


def clock_from_here(runner, facts):
    """The host's clock minus the controller's, when a start time makes it matter."""
    return offset_from_here(runner) if facts.runtime_started_at is not None else None


def look_up_facts(contract, runner, **given):
    """Every lookup and the host's clock reading in one exec on the host (`look_up_host`).

    Except through become: its tty merges the two streams the one exec's output is split
    by, so each lookup is its own exec there and the clock is read after them, alone. Read
    here all the same, not left to the judgment: lease_guard's registered `lookup` (the guard
    role's) must carry it, or a fleet judgment from it (migrate, drain.yml) fails.
    """
    if runner.becomes:
        facts = resolve_runtime_facts(contract, runner, **given)
        return HostLookup(facts, clock_from_here(runner, facts))
    return look_up_host(contract, runner, **given)


def look_up(runner, contract):
    """task_timeout's result, the clock read alone only if the lookups' exec did not read it."""
    looked_up = look_up_facts(contract, runner)
    facts = looked_up.facts
    return lookup_result(facts, looked_up.clock or clock_from_here(runner, facts))


def host_lookup(session):
    """A one-host session's facts and clock reading, shaped as task_timeout's result."""
    return lookup_result(session.facts, session.judged.host_minus_here)


def fleet_facts(lookups, play_hosts):
    """Every host's facts from its registered lookup, and each host's clock minus ours.

    Every host of the play must have answered: one that is missing, failed, was skipped or
    unreachable fails the judgment, named.
    """
    per_host = facts_from_reports(lookups, play_hosts, given_source="lookup")
    offsets = {
        host: _clock_of(host, lookups[host])
        for host, facts in per_host.items()
        if facts.runtime_started_at is not None
    }
    return per_host, offsets


def _clock_of(host, lookup):
    clock = lookup.get("clock")
    try:
        return ClockOffset(float(clock["offset_s"]), float(clock["uncertainty_s"]))
    except (KeyError, TypeError, ValueError):
        raise LookupFailed(
            f"host {host}: its lookup result has no clock reading (pass the registered "
            "result of leaseguard.deploy.task_timeout as it is)"
        ) from None


def given_facts(args):
    """Facts the task passes in (explicit options win over a registered `lookup`)."""
    lookup = args.get("lookup") or {}
    seconds = args.get("task_timeout_s")
    source = None
    if seconds is None and lookup.get("task_timeout_s") is not None:
        seconds, source = float(lookup["task_timeout_s"]), lookup.get("source")
    started = args.get("runtime_started_at") or lookup.get("runtime_started_at")
    if seconds is not None:
        seconds = parse_timeout_s(seconds, what="task_timeout_s")
    return {
        "task_timeout_s": seconds,
        "task_timeout_source": source,
        "runtime_started_at": parse_timestamp(started, what="runtime_started_at")
        if started
        else None,
        "replicas": [str(name) for name in lookup.get("replicas") or ()],
    }


@contextmanager
def guard_session(action, args, contract, facts, label):
    """A session for this host, its lookups run through the task's connection.

    Every lookup and the host's clock reading are one exec (`look_up_facts`: each exec pays
    the host's login shell), run in a thread while the tunnel opens and the guard's
    database connection opens through it (`connect_early`, as `fab guard` does): the
    judgment needs the facts only when its query is bound. Failures are still reported in
    the order of the steps: the tunnel's, the lookups', the connection's.
    `host_lookup(session)` is what task_timeout would have returned for the same lookups.
    """
    runner = AnsibleRunner(action, label)
    lookup = Background(look_up_facts, contract, runner, **facts)
    try:
        with database_path(action, args, probe=False) as (conninfo, tunnel):
            early = connect_early(contract, conninfo, tunnel)
            looked_up, opened = await_lookup(lookup.result, early)
            # The tunnel is the session's link: a poll or an intake resume after a partition
            # reopens the SSH connection and its tunnel instead of retrying a dead port.
            session = GuardSession(
                contract, conninfo, looked_up.facts, runner, tunnel, host_minus_here=looked_up.clock
            )
            session.adopt(opened)
            try:
                yield session
            finally:
                session.close()
    finally:
        lookup.join()


@contextmanager
def fleet_guard_session(action, args, contract, lookups, play_hosts, label):
    """One session judging for every host of the play, from this host's database path.

    Its tunnel is the session's link, reopened after a partition as one host's own is.
    """
    per_host, offsets = fleet_facts(lookups, play_hosts)
    with database_path(action, args) as (conninfo, tunnel):
        runner = AnsibleRunner(action, label)
        with fleet_session(
            contract, conninfo, per_host, runner=runner, link=tunnel, host_offsets=offsets
        ) as session:
            yield session


def shares_one_database(action, args):
    """Whether every host reaches one database the way this task does: directly from the
    controller, or through a tunnel to an address other than each host's own loopback."""
    transport = str(getattr(action._connection, "transport", "") or "").rsplit(".", 1)[-1]
    if not args["tunnel"] or transport == "local":
        return True
    far_end = tunnel_far_end(conninfo_from(args), args["db_host"], args["db_port"])[0]
    return not each_hosts_own(far_end)


@contextmanager
def each_host_session(action, args, contract, lookups, batch, label):
    """One session judging each host of the batch by its own facts (one query per poll),
    from this host's database path; its tunnel is the session's link."""
    per_host, offsets = fleet_facts({h: lookups.get(h) for h in batch}, batch)
    with database_path(action, args) as (conninfo, tunnel):
        runner = AnsibleRunner(action, label)
        session = GuardSession(
            contract, conninfo, per_host, runner, tunnel, label="fleet", host_offsets=offsets
        )
        try:
            yield session
        finally:
            session.close()


__all__ = [
    "ConfigError",
    "LeaseguardError",
    "clock_from_here",
    "contract_from",
    "drain_each",
    "drain_host",
    "drain_options",
    "each_host_session",
    "failure",
    "fleet_guard_session",
    "given_facts",
    "guard_session",
    "host_lookup",
    "intake_line",
    "look_up",
    "lookup_result",
    "require_leaseguard",
    "shared_failures",
    "shares_one_database",
]
