"""The drain loop with a scripted judge and a fake clock: no sleeps, exact counts."""

import logging
from datetime import UTC, datetime

import pytest

from leaseguard.core.errors import CommandFailed, DatabaseUnavailable, LookupFailed, TunnelError
from leaseguard.orchestration.drain import ActionOutcome, Drainer
from leaseguard.orchestration.intake import Intakes, intake_line
from tests.support.verdicts import make_verdict

NOW = datetime(2026, 9, 9, tzinfo=UTC)


def verdict(*live_ids, remaining=600.0):
    return make_verdict(*live_ids, remaining_s=remaining, at=NOW)


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def drainer(script, **kw):
    """A Drainer whose judge answers from `script` (Verdicts or exceptions) in order."""
    answers = iter(script)
    fake = FakeTime()

    def judge():
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return Drainer(judge, kw.pop("poll_s", 5.0), clock=fake.clock, sleep=fake.sleep, **kw), fake


class RecordingIntake:
    def __init__(self, fail_pause=False, names=()):
        self.events = []
        self.fail_pause = fail_pause
        self.names = list(names)

    def pause(self):
        self.events.append("pause")
        if self.fail_pause:
            raise LookupFailed("pg_cron job(s) not found: claim")

    def resume(self):
        self.events.append("resume")

    def paused_intake(self):
        return self.names

    def verify(self):
        self.events.append("verify")


def test_nothing_live_proceeds_after_one_poll():
    loop, _ = drainer([verdict()])
    result = loop.run()
    assert result.drained and result.exit_status == 0
    assert loop.counters.polls == 1


def test_waits_until_the_last_lease_ends_then_exits_0():
    loop, fake = drainer([verdict("1", "2"), verdict("1", "2"), verdict("2"), verdict()], poll_s=5)
    result = loop.run()
    assert result.drained and result.exit_status == 0
    assert fake.now == 15
    assert loop.counters.snapshot() == {
        "polls": 4,
        "idle_polls": 1,
        "live_count_changes": 2,
        "leases_ended": 2,
        "claims_appeared": 0,
        "errors": {},
    }


def test_the_deadline_defaults_to_the_longest_remaining_lease_and_exits_75():
    loop, fake = drainer([verdict("1", remaining=12)] + [verdict("1", remaining=12)] * 10, poll_s=5)
    result = loop.run()
    assert not result.drained and result.exit_status == 75
    assert result.deadline_s == 12
    assert fake.now == 12  # the last sleep is cut to the deadline, not a whole poll


def test_a_requested_deadline_never_extends_past_the_lease():
    loop, _ = drainer(
        [verdict("1", remaining=10)] + [verdict("1", remaining=10)] * 10, deadline_s=3600, poll_s=5
    )
    assert loop.run().deadline_s == 10


def test_a_shorter_requested_deadline_wins():
    loop, _ = drainer([verdict("1", remaining=600)] + [verdict("1")] * 10, deadline_s=7, poll_s=5)
    result = loop.run()
    assert result.deadline_s == 7 and result.exit_status == 75


def test_idle_polls_log_nothing_at_info_but_state_changes_do(caplog):
    caplog.set_level(logging.INFO, logger="leaseguard.drain")
    script = [verdict("1")] + [verdict("1")] * 50 + [verdict("1", "9"), verdict()]
    loop, _ = drainer(script, poll_s=1)
    loop.run()
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(info) == 5  # start, two changes, end, counters: nothing for 50 idle polls
    changes = [r.getMessage() for r in caplog.records if " -> " in r.getMessage()]
    assert changes == [
        "drain host=app1 live 1 -> 2 ended=- appeared=9",
        "drain host=app1 live 2 -> 0 ended=1,9 appeared=-",
    ]
    assert loop.counters.idle_polls == 50


def test_one_failed_poll_is_counted_and_retried():
    loop, _ = drainer([verdict("1"), DatabaseUnavailable("x"), verdict()], poll_s=1)
    result = loop.run()
    assert result.drained
    assert loop.counters.errors == {"DatabaseUnavailable": 1}


def test_polls_failing_for_the_error_budget_fail_closed_with_exit_1():
    # A 600 s drain tolerates a tenth of it (60 s) of failed polls: 61 polls 1 s apart.
    failures = [TunnelError("host app1: tunnel failed")] * 61
    loop, fake = drainer([verdict("1"), *failures], poll_s=1)
    result = loop.run()
    assert result.exit_status == 1 and not result.drained
    assert isinstance(result.error, TunnelError)
    assert loop.counters.errors == {"TunnelError": 61}
    assert fake.now == pytest.approx(61.0)


def test_a_blip_shorter_than_the_budget_does_not_end_a_long_drain():
    # Three failed polls in a row used to end even a two-hour drain.
    blip = [DatabaseUnavailable("x")] * 30
    loop, _ = drainer([verdict("1", remaining=7200.0), *blip, verdict()], poll_s=1)
    result = loop.run()
    assert result.drained and result.exit_status == 0
    assert loop.counters.errors == {"DatabaseUnavailable": 30}


def test_a_short_drain_still_gets_three_polls_of_budget():
    # 10 s deadline: a tenth is 1 s, less than three polls; three failed polls end it.
    loop, _ = drainer([verdict("1", remaining=10.0), *[TunnelError("t")] * 3], poll_s=1)
    result = loop.run()
    assert isinstance(result.error, TunnelError)
    assert loop.counters.errors == {"TunnelError": 3}


def test_a_first_poll_that_fails_never_proceeds():
    loop, _ = drainer([DatabaseUnavailable("x")])
    result = loop.run()
    assert result.exit_status == 1


def test_intake_is_paused_before_and_resumed_after():
    intake = RecordingIntake()
    loop, _ = drainer([verdict("1"), verdict()])
    loop.run(intake)
    assert intake.events == ["pause", "resume"]


def test_the_action_runs_with_intake_held_and_intake_comes_back_after_it():
    intake = RecordingIntake(names=["recorded:claim"])
    loop, _ = drainer([verdict("1"), verdict()])

    def act(result):
        intake.events.append("act")
        return ActionOutcome(7, "command x exited 7")

    result = loop.run(intake, act)
    assert intake.events == ["pause", "verify", "act", "resume"]
    assert result.exit_status == 7 and result.as_dict()["action"]["exit_status"] == 7
    assert result.intake == ("recorded:claim",)


def test_no_action_runs_when_the_drain_does_not_proceed():
    intake = RecordingIntake()
    loop, _ = drainer([verdict("1", remaining=2.0), verdict("1"), verdict("1")], poll_s=1)
    result = loop.run(intake, lambda _: pytest.fail("the action ran on live work"))
    assert result.exit_status == 75 and result.action is None
    assert intake.events == ["pause", "resume"]


def test_a_failing_action_still_gives_intake_back():
    intake = RecordingIntake()
    loop, _ = drainer([verdict()])

    def act(result):
        raise CommandFailed("command x could not start (FileNotFoundError)")

    result = loop.run(intake, act)
    assert result.exit_status == 1 and isinstance(result.error, CommandFailed)
    assert intake.events == ["pause", "verify", "resume"]


def test_without_intake_the_result_says_intake_was_not_held():
    loop, _ = drainer([verdict()])
    result = loop.run()
    assert result.intake is None and intake_line(result.intake).startswith("intake: not held")


def test_intake_is_resumed_on_ctrl_c():
    intake = RecordingIntake()
    loop, _ = drainer([verdict("1"), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        loop.run(intake)
    assert intake.events == ["pause", "resume"]


def test_a_failed_pause_fails_the_drain_and_resumes_what_was_paused():
    first, second = RecordingIntake(), RecordingIntake(fail_pause=True)
    loop, _ = drainer([verdict()])
    result = loop.run(Intakes([first, second]))
    assert result.exit_status == 1
    assert "pg_cron job(s) not found" in str(result.error)
    assert first.events == ["pause", "resume"]
    assert loop.counters.polls == 0


def test_a_signal_landing_while_stop_is_being_set_neither_deadlocks_nor_is_lost():
    """A second signal can land while the main thread is inside the first's `stop.set()`,
    holding the Event's lock: the handler must not take that lock (it once did, and the
    Ansible worker hung with intake paused). Reproduced by calling the installed handler
    while the lock is held."""
    import signal
    import threading

    from leaseguard.orchestration.drain_run import signals_set

    stop, said = threading.Event(), []
    with signals_set(stop, said.append):
        handler = signal.getsignal(signal.SIGINT)
        with stop._cond:  # what the first signal's stop.set() holds
            caller = threading.Thread(target=handler, args=(signal.SIGINT, None), daemon=True)
            caller.start()
            caller.join(timeout=5)
            assert not caller.is_alive(), "the signal handler waits for the Event's lock"
        assert stop.wait(timeout=5)
        handler(signal.SIGTERM, None)
    assert said == [
        "SIGINT: stopping the drain and resuming intake",
        "SIGTERM again: still resuming intake, then exiting",
    ]
    assert signal.getsignal(signal.SIGINT) is not handler  # the previous handler is back


def test_a_signal_is_obeyed_even_when_saying_so_fails():
    """A closed stderr (the `| tee` died with the same Ctrl-C) must not lose the stop, nor
    the signals after it."""
    import signal
    import threading

    from leaseguard.orchestration.drain_run import signals_set

    def say(message):
        raise BrokenPipeError(32, "Broken pipe")

    stop = threading.Event()
    with signals_set(stop, say):
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert stop.wait(timeout=5)


def test_a_part_whose_resume_failed_stays_listed_as_paused():
    class Stuck(RecordingIntake):
        def resume(self):
            self.events.append("resume")
            raise DatabaseUnavailable("connection lost while resuming")

    given_back, stuck = RecordingIntake(names=["command:app1"]), Stuck(names=["pg_cron:claim"])
    intakes = Intakes([given_back, stuck], held=True)
    with pytest.raises(DatabaseUnavailable):
        intakes.resume()
    assert (given_back.events, stuck.events) == (["resume"], ["resume"])
    assert intakes.paused_intake() == ["pg_cron:claim"]  # the status file's paused_intake


def test_a_signal_during_the_last_poll_interrupts_instead_of_proceeding():
    import threading

    stop = threading.Event()
    answers = iter([verdict("1"), verdict()])

    def judge():
        answer = next(answers)
        if not answer.counts.live:
            stop.set()  # the signal lands while the poll that finds nothing live runs
        return answer

    fake = FakeTime()
    ran = []
    loop = Drainer(judge, 5.0, clock=fake.clock, sleep=fake.sleep, stop=stop)
    result = loop.run(act=lambda result: ran.append(result))
    assert type(result.error).__name__ == "DrainInterrupted" and result.exit_status == 1
    assert not result.drained and ran == []


def test_a_hosts_first_verdict_is_a_poll_begun_after_it_asked_not_a_fresher_fleets_poll():
    """fab drain with pause_command: app2's pause was slower; a claim taken on it meanwhile must
    be seen, not the fleet's poll app1 started before app2 asked (within fresh_s)."""
    from types import SimpleNamespace

    from leaseguard.orchestration.drain_run import shared_poll

    claimed = []  # app2's claim, taken while its pause ran

    def judge_each():
        return {"app1": verdict(), "app2": verdict("7") if claimed else verdict()}

    judge_for = shared_poll(SimpleNamespace(judge_each=judge_each), 3600.0, first_fresh=True)
    assert judge_for("app1")().counts.live == 0  # app1 paused fast: the fleet's first poll
    claimed.append("7")  # app2's pause still running: a claim lands on it
    assert judge_for("app2")().counts.live == 1  # its own first poll, begun after it asked
    # Sharing still holds once each has answered: app1 takes the poll app2 started.
    polls = []
    judge_for2 = shared_poll(
        SimpleNamespace(judge_each=lambda: polls.append(1) or judge_each()),
        3600.0,
        first_fresh=True,
    )
    first, second = judge_for2("app1"), judge_for2("app2")
    first(), second(), first(), second()
    assert len(polls) == 3  # app1's first, app2's first, app1's second (app2 takes it)
