"""Action plugin for leaseguard.deploy.lease_guard: the guard reports, the playbook decides."""

import os
import threading
from contextlib import suppress
from dataclasses import replace

from ansible_collections.leaseguard.deploy.plugins.plugin_utils import _action
from ansible_collections.leaseguard.deploy.plugins.plugin_utils._action import api

DRAIN_KEYS = (
    *("deadline_s", "poll_s", "pause_cron_jobs", "cron_database", "cron_user", "cron_password"),
    *("pause_command", "resume_command", "status_file", "metrics_file", "resume_retry_s"),
)


class ActionModule(_action.LeaseguardAction):
    def act(self, args, host, task_vars):
        """The verdict of this host, the fleet or each host; with wait, drained first."""
        each, fleet = args["each_host"], args["fleet_lookups"] is not None
        if each:  # each_host needs fleet_lookups, one shared database and each host's intake held
            if args["fleet_lookups"] is None:
                raise api.ConfigError("each_host judges the hosts of fleet_lookups; pass them")
            if _action.tunnels(self, args):
                conninfo = _action.conninfo_from(args)
                far_end = api.tunnel_far_end(conninfo, args["db_host"], args["db_port"])[0]
                if api.each_hosts_own(far_end):
                    raise api.ConfigError(
                        "each_host judges every host over this host's tunnel, but the database "
                        "address is each host's own loopback (db_host), where each host may have a "
                        "database of its own: set leaseguard_db_host to the shared database's "
                        "address as the hosts see it"
                    )
            if args["held_intakes"] is None and (args["pause_cron_jobs"] or args["pause_command"]):
                raise api.ConfigError(
                    "each_host drains hold no intake of their own: hold each host's with "
                    "leaseguard.deploy.intake_hold first and pass the results as held_intakes"
                )
        drain_args = {key: args[key] for key in DRAIN_KEYS}
        if each or args["held_intake"]:  # the caller holds intake: the drain pauses nothing
            drain_args.update(pause_cron_jobs=[], pause_command=[], resume_command=[])
        options = api.drain_options(drain_args)
        if fleet and not each and (limit := task_vars.get("ansible_limit")):
            # The roles and drain.yml refuse it first; this holds a run started past them.
            hosts = ", ".join(task_vars.get("ansible_play_hosts_all", ()))
            raise api.ConfigError(
                f"a fleet judgment (fleet_lookups) is judged once for every host of the fleet, and "
                f"--limit {limit} leaves hosts out (only {hosts} would be judged; a live claim on "
                "another host would count as orphaned). Nothing was judged or paused. Run without "
                "--limit"
            )
        waits = args["wait"] and not self._task.check_mode
        front = f"ansible-playbook lease_guard ({'fleet' if fleet else host})"
        # A drain of this task holds intake as its own (no leftover); else cron.job is only read.
        intake = options.intake(front) if waits and not each else None
        # The caller's intake_hold results, taken a moment ago: not leftovers to give back by hand.
        registered = [args["held_intake"], *(args["held_intakes"] or {}).values()]
        holds = [(r or {}).get("hold") for r in registered]
        crons = [((hold or {}).get("cron") or {}) for hold in holds]
        tokens = tuple(str(cron["token"]) for cron in crons if cron.get("token"))
        intake = replace(intake or api.IntakeAccess(options.cron_database), own_holds=tokens)
        fleet_hosts = task_vars.get("ansible_play_batch" if each else "ansible_play_hosts_all", ())
        with api.task_session(
            _action.contract_from(args),
            _action.AnsibleRunner(self, host),
            _action.database_path(self, args, probe=fleet),
            intake,
            given={key: args[key] for key in ("lookup", "task_timeout_s", "runtime_started_at")},
            lookups=args["fleet_lookups"],
            hosts=tuple(fleet_hosts),
            each=each,
        ) as session:
            looked_up = {}
            if not fleet:  # this host's facts and clock reading, as task_timeout returns them
                report = api.host_report(session.facts, session.host_minus_here)
                looked_up = {"lookup": {"changed": False, **report}}
            if waits:
                drained, events = _drain(session, options, host, front, each)
                proceeds = any(result.drained for result in drained.values())
            else:
                verdicts = session.judge_each() if each else {host: session.judge()}
                judged = {name: _report(v.as_dict(), args) for name, v in verdicts.items()}
                proceeds = any(result["decision"] == "proceed" for result in judged.values())
            unread = []
            try:  # a proceed stands only while the caller's holds do (IntakeLost fails it)
                if proceeds:
                    api.verify_holds(lambda: session.connect_writable(options.intake()), holds)
            except api.IntakeLost:
                raise
            except api.LeaseguardError as exc:  # a hold another role took: a warning
                said = f"the intake hold could not be read back before proceeding ({exc.kind})"
                unread = [f"{said}: {exc}"]
        if waits:
            if not each and drained[host].error is not None:
                raise drained[host].error
            judged = {name: _drained(name, r, args, events) for name, r in drained.items()}
        if each:
            result = _each_result(judged, args, host)
        else:
            own = drained[host].intake if waits else None
            result = {**judged[host], **looked_up, "intake": _intake(args["held_intake"], own)}
        if unread:
            result["warnings"] = [*result.get("warnings", []), *unread]
        return result


def _drain(session, options, host, front, each):
    """Each host's drain by name (this host's alone without each) and the drain's log lines.
    SIGINT/SIGTERM/SIGHUP (a worker's own handler would kill it: no `finally`) or the controller
    gone (SIGKILL orphans it) set `stop`: intake comes back. Said to its stderr, not /dev/null."""
    label = "fleet" if each else session.host
    stop, done, drained = threading.Event(), threading.Event(), None
    try:
        out = open(f"/proc/{os.getppid()}/fd/2", "a", encoding="utf-8")  # noqa: SIM115
    except OSError:
        out = None

    def say(message):
        line = f"leaseguard [{label}]: {message}"
        with suppress(Exception):  # the controller may be gone: the resume matters, not this
            if out is None:
                _action.display.display(line, stderr=True)
            else:
                print(line, file=out, flush=True)

    def stop_when_orphaned(parent):
        while not done.wait(0.5):
            if os.getppid() != parent:
                say("ansible-playbook is gone: stopping the drain and resuming intake")
                stop.set()
                return

    watcher = threading.Thread(target=stop_when_orphaned, args=(os.getppid(),), daemon=True)
    watcher.start()
    try:
        with _action.drain_events(host) as events, api.signals_set(stop, say):
            if each:
                drained = api.drain_every_host(session, options, stop)
            else:
                drained = api.drain_host(
                    session, options, front=front, resume_hint=_action.RESUME_HINT, stop=stop
                )
    finally:
        if stop.is_set():  # intake named only when this task paused it and gave it back
            said = "drain interrupted by a signal"
            if drained is not None and (options.pause_cron_jobs or options.pause_command):
                jobs = ", ".join(options.pause_cron_jobs) or "none"
                said += f"; intake was resumed (pg_cron jobs: {jobs})"
            say(said)
        done.set()
        watcher.join()
        if out is not None:
            out.close()
    return (drained if each else {host: drained}), events


def _drained(host, drained, args, events):
    """One host's drain as its task result would be (a failure: failed, named)."""
    if drained.error is not None:
        return _action.failure(drained.error, host)
    drain = {key: value for key, value in drained.as_dict().items() if key != "verdict"}
    return {**_report(drained.verdict.as_dict(), args), "drain": {**drain, "events": events}}


def _each_result(judged, args, host):
    """The task host's result, every host's under `hosts` and counted in `summary` (FORCED too)."""
    for name, result in judged.items():
        result["intake"] = _intake((args["held_intakes"] or {}).get(name))
    summary, worst = api.decisions_summary(result["decision"] for result in judged.values())
    # A task host outside the batch reports the worst decision, never a bare proceed.
    outside = {"changed": False, "decision": worst, "msg": summary, "failed": worst == "failed"}
    own = judged.get(host, outside)
    task = {**own, "hosts": judged, "summary": f"hosts: {summary}"}
    forced = [r["warnings"][-1] for name, r in judged.items() if r.get("forced") and name != host]
    if forced:
        task.update(forced=True, warnings=[*own.get("warnings", []), *forced])
    # fail_on_defer stops on every host not safe to restart: a defer, or a check that failed.
    unsafe = {
        word: [name for name, r in judged.items() if r["decision"] == decision]
        for word, decision in (("deferring", "defer"), ("failed", "failed"))
    }
    fails = args["fail_on_defer"] and not args["force"] and not own.get("failed")
    if fails and {name for names in unsafe.values() for name in names} - {host}:
        named = "; ".join(f"{word}: {', '.join(names)}" for word, names in unsafe.items() if names)
        task.update(failed=True, msg=f"{own['msg']}; {named}")
    return task


def _intake(registered, own=None):
    """Whether anything stops new claims until the caller's action: its hold, else the drain's."""
    held = tuple(((registered.get("hold") or {}).get("what") if registered else own) or ())
    return {"held": bool(held), "what": list(held), "msg": api.intake_line(held or None)}


def _report(verdict, args):
    """The verdict as the task result, plus what the caller decided to do with a defer."""
    counts = " ".join(f"{name}={n}" for name, n in verdict["counts"].items())
    msg = f"{verdict['decision']}: {counts} lease_s={verdict['lease_s']}"
    result = {**verdict, "changed": False, "msg": msg}
    if verdict["decision"] != "defer":
        return result
    if not verdict.get("wait_upper_bound_known", True):
        result["msg"] += "; a live lease never ends or its end is unknown (see warnings)"
    else:
        result["msg"] += f"; live leases end within {verdict['wait_upper_bound_s']:.0f}s"
    if args["force"]:
        claims = ", ".join(
            f"{claim['id']} (claimed {claim['claimed_at']}, lease ends in {claim['remaining_s']}s)"
            for claim in verdict["live"]
        )
        live = verdict["counts"]["live"]
        forced = f"FORCED on {verdict['host']}: {live} live claim(s) will be killed: {claims}"
        result.update(forced=True, warnings=[*verdict["warnings"], forced])
    elif args["fail_on_defer"]:
        result["failed"] = True
    return result
