# Copyright: (c) 2026, leaseguard contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action plugin for leaseguard.deploy.lease_guard (documented in plugins/modules/).

Runs on the controller: lookups go through the task's connection, the database through an
SSH tunnel opened with the host's own inventory settings, and the judgment is the core's.
The guard reports; the playbook decides (fail_on_defer is the one shortcut for callers that
only ever want to stop).
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.leaseguard.deploy.plugins.module_utils._specs import role_variables
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import LeaseguardAction
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._drain_front import (
    RESUME_HINT,
    drain_events,
    stop_on_signals,
)
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._guard_front import (
    ConfigError,
    contract_from,
    drain_each,
    drain_host,
    drain_options,
    each_host_session,
    failure,
    fleet_guard_session,
    given_facts,
    guard_session,
    host_lookup,
    intake_line,
    shared_failures,
    shares_one_database,
)

DRAIN_KEYS = (
    "deadline_s",
    "poll_s",
    "pause_cron_jobs",
    "cron_database",
    "cron_user",
    "cron_password",
    "pause_command",
    "resume_command",
    "status_file",
    "metrics_file",
    "resume_retry_s",
)


class ActionModule(LeaseguardAction):
    module = "lease_guard"
    role_variables = role_variables()
    # The check is read-only and check mode never pauses intake (see _guard).

    def act(self, args, host, task_vars):
        if args["each_host"]:
            return self._guard_each(args, host, task_vars.get("ansible_play_batch", ()))
        return self._guard(args, host, task_vars.get("ansible_play_hosts_all", ()))

    def _guard_each(self, args, host, batch):
        """Every host of the batch judged by its own facts in ONE query per poll, over one
        connection through this host; with wait, every host drained at once."""
        if args["fleet_lookups"] is None:
            raise ConfigError("each_host judges the hosts of fleet_lookups; pass them")
        _one_database(self, args)
        holds = args["held_intakes"]
        if holds is None and (args["pause_cron_jobs"] or args["pause_command"]):
            raise ConfigError(
                "each_host drains hold no intake of their own: hold each host's with "
                "leaseguard.deploy.intake_hold first and pass the results as held_intakes"
            )
        # Each host's intake is the caller's (held_intakes): the drains pause nothing.
        drain_args = {key: args[key] for key in DRAIN_KEYS}
        drain_args.update(pause_cron_jobs=[], pause_command=[], resume_command=[])
        options = drain_options(drain_args)
        holds = holds or {}
        waiting = args["wait"] and not self._task.check_mode
        contract = contract_from(args)
        with each_host_session(self, args, contract, args["fleet_lookups"], batch, host) as s:
            s.cron_database = options.cron_database
            if not waiting:
                judged = {h: _report(v.as_dict(), args) for h, v in s.judge_each().items()}
                return _each_result(judged, holds, host)
            with drain_events(host) as events, stop_on_signals("fleet") as (stop, say):
                try:
                    drained = drain_each(s, options, stop=stop)
                finally:
                    if stop.is_set():
                        say("drain interrupted by a signal")
        shared = shared_failures(drained)
        for cause_hosts in shared.values():
            cause = drained[cause_hosts[0]].error
            raise type(cause)(f"the fleet's judgment failed ({cause.kind}): {cause}")
        judged = {h: _drained(h, result, args, events) for h, result in drained.items()}
        return _each_result(judged, holds, host)

    def _guard(self, args, host, play_hosts):
        contract = contract_from(args)
        held = _held(args["held_intake"])
        drain_args = {key: args[key] for key in DRAIN_KEYS}
        if held is not None:  # the caller holds intake: the drain pauses nothing of its own
            drain_args.update(pause_cron_jobs=[], pause_command=[], resume_command=[])
        options = drain_options(drain_args)
        waiting = args["wait"] and not self._task.check_mode
        with self._session(args, contract, host, play_hosts) as session:
            session.cron_database = options.cron_database
            looked_up = _looked_up(args, session)
            if not waiting:
                verdict = _report(session.judge().as_dict(), args)
                return {**verdict, **looked_up, "intake": _intake(held)}
            with drain_events(host) as events, stop_on_signals(session.host) as (stop, say):
                try:
                    drained = drain_host(
                        session,
                        options,
                        front=f"ansible-playbook lease_guard ({session.host})",
                        resume_hint=RESUME_HINT,
                        stop=stop,
                    )
                finally:
                    if stop.is_set():
                        say(_after_signal(options))
        if drained.error is not None:
            raise drained.error
        drain = {key: value for key, value in drained.as_dict().items() if key != "verdict"}
        report = _report(drained.verdict.as_dict(), args)
        intake = _intake(held if held is not None else drained.intake)
        return {**report, **looked_up, "drain": {**drain, "events": events}, "intake": intake}

    def _session(self, args, contract, host, play_hosts):
        """This host's own session, or with fleet_lookups one judgment for every host."""
        if args["fleet_lookups"] is None:
            return guard_session(self, args, contract, given_facts(args), host)
        return fleet_guard_session(self, args, contract, args["fleet_lookups"], play_hosts, host)


def _one_database(action, args):
    """each_host judges every host through this host's path: refused where each host may
    reach a database of its own (its loopback, through its own tunnel)."""
    if shares_one_database(action, args):
        return
    raise ConfigError(
        "each_host judges every host over this host's tunnel, but the database address is "
        "each host's own loopback (db_host), where each host may have a database of its own: "
        "set leaseguard_db_host to the shared database's address as the hosts see it"
    )


def _drained(host, drained, args, events):
    """One host's drain as its task result would be (a failure: failed, named)."""
    if drained.error is not None:
        return failure(drained.error, host)
    drain = {key: value for key, value in drained.as_dict().items() if key != "verdict"}
    return {**_report(drained.verdict.as_dict(), args), "drain": {**drain, "events": events}}


def _each_result(judged, holds, host):
    """Every host's result under `hosts`, each with what held its intake. The task's own
    result is its host's (as without each_host: its failure fails the task), and `summary`
    counts the decisions."""
    for name, result in judged.items():
        result["intake"] = _intake(_held(holds.get(name)))
    decisions = Counter(result["decision"] for result in judged.values())
    summary = ", ".join(f"{decision} {n}" for decision, n in sorted(decisions.items()))
    # Not among them (never in a batch it runs for): the worst decision, never a bare proceed.
    worst = next(d for d in ("failed", "defer", "proceed") if decisions[d] or d == "proceed")
    own = judged.get(host, {"changed": False, "decision": worst, "msg": summary})
    return {**own, "hosts": judged, "summary": f"hosts: {summary}"}


def _held(registered):
    """What the caller's intake_hold task holds (None: the caller holds nothing)."""
    if not registered:
        return None
    return tuple((registered.get("hold") or {}).get("what") or ())


def _intake(held):
    """Whether anything stopped new claims between this verdict and the caller's action."""
    if not held:
        return {"held": False, "what": [], "msg": intake_line(None)}
    return {"held": True, "what": list(held), "msg": intake_line(tuple(held))}


def _looked_up(args, session):
    """One host's facts as task_timeout returns them, so a role can register them too."""
    return {} if args["fleet_lookups"] is not None else {"lookup": host_lookup(session)}


def _after_signal(options):
    jobs = ", ".join(options.pause_cron_jobs) or "none"
    return f"drain interrupted by a signal; intake was resumed (pg_cron jobs: {jobs})"


def _report(verdict, args):
    """The verdict as the task result, plus what a caller decided to do with a defer."""
    result = {**verdict, "changed": False, "msg": _summary(verdict)}
    if verdict["decision"] != "defer":
        return result
    if args["force"]:
        result["forced"] = True
        result["warnings"] = [*verdict["warnings"], _forced_warning(verdict)]
    elif args["fail_on_defer"]:
        result["failed"] = True
    return result


def _summary(verdict):
    counts = " ".join(f"{name}={n}" for name, n in verdict["counts"].items())
    tail = ""
    if verdict["decision"] == "defer" and not verdict.get("wait_upper_bound_known", True):
        tail = "; a live lease never ends or its end is unknown (see warnings)"
    elif verdict["decision"] == "defer":
        tail = f"; live leases end within {verdict['wait_upper_bound_s']:.0f}s"
    return f"{verdict['decision']}: {counts} lease_s={verdict['lease_s']}{tail}"


def _forced_warning(verdict):
    claims = ", ".join(
        f"{claim['id']} (claimed {claim['claimed_at']}, lease ends in {claim['remaining_s']}s)"
        for claim in verdict["live"]
    )
    return (
        f"FORCED on {verdict['host']}: {verdict['counts']['live']} live claim(s) will be "
        f"killed: {claims}"
    )
