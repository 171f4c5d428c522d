"""The drain's status snapshot, metrics file and reader, over the real Drainer loop.

The judge is scripted and the clock fake (no sleeps); the files are real files in a
per-test directory, the metrics read back with prometheus_client's own text parser.
"""

import json
import logging
import os
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from leaseguard.adapters.pauses import Hold
from leaseguard.cli import main
from leaseguard.core.errors import ConfigError, PollFailed
from leaseguard.orchestration.drain import COUNTER_NAMES, DrainCounters, DrainResult
from leaseguard.orchestration.drain_status import (
    StatusBoard,
    atomic_write,
    read_status,
    render_metrics,
)
from leaseguard.orchestration.intake import CronJobsPause, Intakes
from tests.unit.test_drain_loop import RecordingIntake, drainer, verdict

SECRET = "hunter2-sentinel-5ecret"


class LeakyDriverError(Exception):
    """Stands in for a driver error whose text carries a connection string."""


def board_in(tmp_path, **kw):
    return StatusBoard(tmp_path / "drain.json", tmp_path / "drain.prom", **kw)


def observed(tmp_path, script, host="app1", intake=None, **kw):
    board = board_in(tmp_path)
    loop, _ = drainer(script, observer=board.observer(host, intake), **kw)
    return loop, board


def status(tmp_path):
    return json.loads((tmp_path / "drain.json").read_text())


def metrics(tmp_path):
    """{sample name + sorted labels: value} from the real Prometheus text parser."""
    text = (tmp_path / "drain.prom").read_text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class Snapshots:
    """An observer beside the board that copies the status file after every poll."""

    def __init__(self, tmp_path, board):
        self.tmp_path, self.board, self.seen = tmp_path, board, []

    def wrap(self, observer):
        outer = self

        class Copying:
            def after_poll(self, *args):
                observer.after_poll(*args)
                outer.seen.append(status(outer.tmp_path))

            def finished(self, result, **how):
                observer.finished(result, **how)

        return Copying()


# --- the snapshot ---------------------------------------------------------------------------


def test_the_snapshot_follows_every_poll_and_ends_finished(tmp_path):
    board = board_in(tmp_path)
    copies = Snapshots(tmp_path, board)
    script = [verdict("1", "2"), verdict("1", "2"), verdict("2"), verdict()]
    loop, _ = drainer(script, poll_s=5, observer=copies.wrap(board.observer("app1")))
    result = loop.run()
    assert result.exit_status == 0
    assert [s["counters"]["polls"] for s in copies.seen] == [1, 2, 3, 4]
    assert [s["counts"]["live"] for s in copies.seen] == [2, 2, 1, 0]
    assert [s["decision"] for s in copies.seen] == ["defer", "defer", "defer", "proceed"]
    assert [s["elapsed_s"] for s in copies.seen] == [0, 5, 10, 15]
    assert all(s["state"] == "running" and s["exit_status"] is None for s in copies.seen)
    final = status(tmp_path)
    assert final["available"] is True and final["scope"] == "process_lifetime"
    assert final["pid"] == os.getpid() and final["hosts"] == ["app1"]
    assert final["state"] == "finished" and final["exit_status"] == 0
    assert final["decision"] == "proceed"
    assert final["deadline_s"] == 600 and final["wait_upper_bound_s"] == 0
    assert final["counters"] == {
        "polls": 4,
        "idle_polls": 1,
        "live_count_changes": 2,
        "leases_ended": 2,
        "claims_appeared": 0,
        "errors": {},
    }


def test_a_deadline_reached_ends_as_defer_with_exit_75(tmp_path):
    loop, _ = observed(tmp_path, [verdict("1")] * 10, poll_s=5, deadline_s=12)
    assert loop.run().exit_status == 75
    final = status(tmp_path)
    assert (final["state"], final["decision"], final["exit_status"]) == ("finished", "defer", 75)
    assert final["counts"]["live"] == 1 and final["wait_upper_bound_s"] == 600


def test_the_intake_this_drain_paused_is_listed_while_it_waits_and_gone_after(tmp_path):
    cron = CronJobsPause(connect=None, job_names=["claim"], retry_s=60)
    held = Hold("t0", ("claim",), (1,), "test", "drain")
    cron.pause = lambda: setattr(cron, "hold", held)  # the hold without pg_cron
    cron.resume = lambda: setattr(cron, "hold", None)
    intake = Intakes([cron])
    board = board_in(tmp_path)
    copies = Snapshots(tmp_path, board)
    loop, _ = drainer(
        [verdict("1"), verdict()], observer=copies.wrap(board.observer("app1", intake))
    )
    loop.run(intake)
    assert [s["paused_intake"] for s in copies.seen] == [["pg_cron:claim"]] * 2
    assert status(tmp_path)["paused_intake"] == []


def test_an_intake_that_says_nothing_lists_nothing(tmp_path):
    loop, _ = observed(tmp_path, [verdict()], intake=RecordingIntake())
    loop.run(RecordingIntake())
    assert status(tmp_path)["paused_intake"] == []


def test_an_interrupted_drain_says_so(tmp_path):
    loop, _ = observed(tmp_path, [verdict("1"), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    final = status(tmp_path)
    assert (final["state"], final["decision"], final["exit_status"]) == (
        "interrupted",
        "failed",
        1,
    )


def test_several_hosts_share_one_file_with_the_worst_decision_and_summed_counters(tmp_path):
    board = board_in(tmp_path)
    done, _ = drainer([verdict()], observer=board.observer("app1"))
    busy, _ = drainer([verdict("7"), verdict("7")], observer=board.observer("app2"))
    done.run()
    busy.observer.after_poll(DrainResult(verdict("7"), busy.counters, 0.0, 600.0))
    busy.counters.polls = 2
    busy.observer.after_poll(DrainResult(verdict("7"), busy.counters, 5.0, 600.0))
    snapshot = status(tmp_path)
    assert snapshot["hosts"] == ["app1", "app2"]
    assert snapshot["state"] == "running" and snapshot["exit_status"] is None
    assert snapshot["decision"] == "defer"
    assert snapshot["counters"]["polls"] == 3 and snapshot["counts"]["live"] == 1
    assert [d["state"] for d in snapshot["drains"]] == ["finished", "running"]


# --- the metrics file -----------------------------------------------------------------------


def test_the_metrics_file_parses_with_help_type_and_a_host_label(tmp_path):
    loop, _ = observed(tmp_path, [verdict("1", "2"), db_down(), verdict("2"), verdict()])
    loop.run()
    text = (tmp_path / "drain.prom").read_text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["leaseguard_drain_polls"].type == "counter"
    assert families["leaseguard_drain_claims"].type == "gauge"
    for family in families.values():
        assert family.documentation, family.name
        assert all(s.labels["host"] == "app1" for s in family.samples), family.name
    for name in COUNTER_NAMES:
        assert f"# TYPE leaseguard_drain_{name}_total counter" in text
    values = metrics(tmp_path)
    host = (("host", "app1"),)
    assert values[("leaseguard_drain_polls_total", host)] == 4
    assert values[("leaseguard_drain_leases_ended_total", host)] == 2
    assert values[("leaseguard_drain_errors_total", (*host, ("type", "DatabaseUnavailable")))] == 1
    assert values[("leaseguard_drain_claims", (("class", "live"), *host))] == 0
    assert values[("leaseguard_drain_running", host)] == 0
    assert values[("leaseguard_drain_exit_status", host)] == 0


def test_label_values_are_escaped():
    board = StatusBoard(None, None)
    board.observer('odd"host\\name\nx')
    text = render_metrics(board.snapshot())
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.labels["host"] for s in samples} == {'odd"host\\name\nx'}


# --- errors stay sanitized ------------------------------------------------------------------


def db_down():
    from leaseguard.core.errors import DatabaseUnavailable

    return DatabaseUnavailable("host app1: database unavailable (OperationalError)")


def test_an_unexpected_error_is_kept_to_its_class_name_and_the_budget_fails_closed(
    tmp_path, caplog
):
    caplog.set_level(logging.DEBUG, logger="leaseguard")
    leak = LeakyDriverError(f"connection to postgresql://app:{SECRET}@db failed")
    # A 100 s deadline: a tenth of it, 10 s, is two polls 5 s apart.
    script = [verdict("1", remaining=100.0), leak, leak, leak, verdict()]
    loop, _ = observed(tmp_path, script)
    result = loop.run()
    assert result.exit_status == 1 and not result.drained
    assert isinstance(result.error, PollFailed)
    assert loop.counters.polls == 4  # the first, then the whole budget of three
    assert loop.counters.errors == {"LeakyDriverError": 3}
    failures = [r for r in caplog.records if "drain_poll_failed" in r.getMessage()]
    assert [r.getMessage() for r in failures] == [
        "drain poll failed reason=drain_poll_failed exc_type=LeakyDriverError"
    ] * 3
    assert all(r.exc_info is None for r in failures)
    final = status(tmp_path)
    assert final["counters"]["errors"] == {"LeakyDriverError": 3}
    assert (final["decision"], final["exit_status"]) == ("failed", 1)
    for text in (
        caplog.text,
        (tmp_path / "drain.json").read_text(),
        (tmp_path / "drain.prom").read_text(),
        json.dumps(result.as_dict()),
    ):
        assert SECRET not in text


def test_an_unexpected_error_within_the_budget_does_not_stop_the_drain(tmp_path):
    leak = LeakyDriverError(SECRET)
    loop, _ = observed(tmp_path, [verdict("1"), leak, leak, verdict("1"), verdict()])
    result = loop.run()
    assert result.drained and result.exit_status == 0
    assert status(tmp_path)["counters"]["errors"] == {"LeakyDriverError": 2}


def test_an_unexpected_error_on_the_first_poll_fails_closed(tmp_path):
    loop, _ = observed(tmp_path, [LeakyDriverError(SECRET)])
    result = loop.run()
    assert result.exit_status == 1
    assert status(tmp_path)["decision"] == "failed"


def test_idle_polls_stay_silent_at_info_with_the_files_written(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="leaseguard")
    loop, _ = observed(tmp_path, [verdict("1")] * 50 + [verdict()])
    loop.run()
    assert loop.counters.idle_polls == 49
    # start, the one change, drained, counters: none of the 49 idle polls
    assert len(caplog.records) == 4, caplog.text


# --- writing --------------------------------------------------------------------------------


def test_a_directory_that_cannot_take_the_file_fails_before_the_drain(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot write .*FileNotFoundError"):
        StatusBoard(tmp_path / "missing" / "drain.json", None)


def test_a_write_failing_mid_drain_is_logged_once_and_the_drain_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="leaseguard")
    target = tmp_path / "gone" / "drain.json"
    target.parent.mkdir()
    board = StatusBoard(target, None)
    target.unlink()
    target.parent.rmdir()
    loop, _ = drainer([verdict("1")] * 4 + [verdict()], observer=board.observer("app1"))
    assert loop.run().exit_status == 0
    failed = [r for r in caplog.records if "status_write_failed" in r.getMessage()]
    assert len(failed) == 1 and "exc_type=FileNotFoundError" in failed[0].getMessage()


def test_an_atomic_write_replaces_the_file_and_leaves_no_temp_behind(tmp_path):
    target = tmp_path / "x.prom"
    atomic_write(target, "old\n")
    atomic_write(target, "new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.prom"]
    assert target.stat().st_mode & 0o044  # readable by a collector running as another user


# --- reading --------------------------------------------------------------------------------


def finished_pid():
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


def written(tmp_path, **changes):
    board = board_in(tmp_path)
    board.observer("app1").after_poll(DrainResult(verdict("1"), DrainCounters(polls=1), 1.0, 600.0))
    snapshot = {**status(tmp_path), **changes}
    (tmp_path / "drain.json").write_text(json.dumps(snapshot))
    return tmp_path / "drain.json"


def test_a_running_drain_of_a_live_writer_is_available(tmp_path):
    found = read_status(written(tmp_path))
    assert found["available"] is True and found["state"] == "running"


@pytest.mark.parametrize("state", ["running", "interrupted"])
def test_a_file_whose_writer_is_gone_is_stale_unless_it_finished(tmp_path, state):
    found = read_status(written(tmp_path, pid=finished_pid(), pid_started=None, state=state))
    if state == "running":
        assert found["available"] is False
        assert found["reason"].startswith("stale: writer pid")
        assert found["last_snapshot"]["counters"]["polls"] == 1
    else:
        assert found["available"] is True


def test_a_finished_drain_stays_readable_after_its_writer_exited(tmp_path):
    path = written(tmp_path, pid=finished_pid(), state="finished", exit_status=0)
    assert read_status(path)["available"] is True


@pytest.mark.parametrize("state", ["running", "finished"])
def test_a_pid_no_process_can_have_is_a_gone_writer_not_a_traceback(tmp_path, state):
    path = written(tmp_path, pid=2**40, state=state, exit_status=0)  # a file moved here
    assert read_status(path)["available"] is (state == "finished")


def test_a_drain_without_files_builds_no_snapshot_per_poll(monkeypatch):
    """A fleet's drains each report after every poll: without files that must cost nothing
    (each snapshot copies every host's row: 500 hosts took 14 s a poll)."""
    board = StatusBoard(None, None)
    monkeypatch.setattr(board, "snapshot", lambda: pytest.fail("a snapshot nobody reads"))
    board.observer("app1").after_poll(DrainResult(verdict("1"), DrainCounters(polls=1), 1.0, 9.0))


def test_a_reused_pid_is_not_mistaken_for_the_writer(tmp_path):
    path = written(tmp_path, pid_started=1)  # our pid, but a different start time
    assert read_status(path)["available"] is False


INVALID = [
    ("missing", None, "no status file"),
    ("garbage", "{not json", "not valid JSON"),
    ("a list", "[]", "not an object"),
    ("no scope", '{"available": true}', "no available/scope"),
    (
        "negative counter",
        {"counters": {"polls": -1}},
        "counters missing or negative",
    ),
    ("bad state", {"state": "weird"}, "unknown state"),
    ("no pid", {"pid": "12"}, "no writer pid"),
]


@pytest.mark.parametrize(("name", "content", "reason"), INVALID, ids=[c[0] for c in INVALID])
def test_a_file_that_is_no_drain_status_is_unavailable(tmp_path, name, content, reason):
    path = tmp_path / "drain.json"
    if isinstance(content, dict):
        path = written(tmp_path)
        snapshot = json.loads(path.read_text())
        for key, value in content.items():
            snapshot[key] = {**snapshot[key], **value} if key == "counters" else value
        path.write_text(json.dumps(snapshot))
    elif content is not None:
        path.write_text(content)
    found = read_status(path)
    assert found["available"] is False
    assert reason in found["reason"]


def test_status_exits_1_without_a_traceback_when_unavailable(tmp_path, capsys):
    assert main(["status", str(tmp_path / "none.json"), "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["available"] is False and err == ""
    assert main(["status", str(tmp_path / "none.json")]) == 1
    assert capsys.readouterr().out.startswith("available=false reason=")


def test_status_prints_one_line_for_an_available_snapshot(tmp_path, capsys):
    assert main(["status", str(written(tmp_path))]) == 0
    line = capsys.readouterr().out
    assert "state=running hosts=app1 decision=defer live=1" in line
    assert "elapsed_s=1/600" in line and "polls=1" in line
