"""A fleet judged in one query per poll: each host by its own facts, over one connection."""

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseguard.adapters.db import connect
from leaseguard.adapters.guard import Subject, judge_subjects
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import ConfigError, DatabaseUnavailable
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout
from leaseguard.orchestration.drain_run import DrainOptions, drain_each, shared_poll
from leaseguard.orchestration.drain_status import StatusBoard
from leaseguard.orchestration.session import GuardSession
from sandbox.runs_table import insert_runs
from tests.support.judging import evaluate
from tests.support.oracle import Row, classify

pytestmark = pytest.mark.integration

T0 = datetime(2026, 9, 9, 14, 48, 57, tzinfo=UTC)
HOUR = 3600.0
CLAIMED = T0 - timedelta(minutes=10)


@pytest.fixture
def runs(runs_db):
    return runs_db


def fill(db, rows):
    with db.connect() as conn:
        conn.execute("TRUNCATE execution_runs")
        insert_runs(conn, rows)


def subject(host, lease_s, started):
    return Subject(host, TaskTimeout(lease_s / 2, "given"), lease_s, started)


def judged_together(db, subjects, contract=None):
    contract = contract or contract_from_mapping({})
    with connect(db.dsn, contract.connect_timeout_s) as conn:
        return judge_subjects(conn, contract, subjects, as_of=T0)[0]


def test_one_query_judges_each_host_by_its_own_start_and_lease_at_the_boundaries(runs):
    fill(runs, [(1, "running", CLAIMED, None), (2, "open", None, None)])
    age_s = (T0 - CLAIMED).total_seconds()
    verdicts = judged_together(
        runs,
        [
            subject("started-before", 2 * HOUR, T0 - timedelta(hours=1)),  # live
            subject("started-at-the-claim", 2 * HOUR, CLAIMED),  # not before: live
            subject("started-after", 2 * HOUR, CLAIMED + timedelta(microseconds=1)),  # orphan
            subject("lease-ends-now", age_s, T0 - timedelta(hours=1)),  # expired: stale
            subject("lease-ends-later", age_s + 0.001, T0 - timedelta(hours=1)),  # live
            subject("start-unknown", 2 * HOUR, None),  # no cut-off: live
        ],
    )
    live = {v.host: (v.counts.live, v.counts.orphaned, v.counts.stale) for v in verdicts}
    assert live == {
        "started-before": (1, 0, 0),
        "started-at-the-claim": (1, 0, 0),
        "started-after": (0, 1, 0),
        "lease-ends-now": (0, 0, 1),
        "lease-ends-later": (1, 0, 0),
        "start-unknown": (1, 0, 0),
    }
    assert all(v.counts.queued == 1 for v in verdicts)
    assert [v.live[0].id for v in verdicts if v.counts.live] == ["1"] * 4
    assert verdicts[0].wait_upper_bound_s == pytest.approx(2 * HOUR - age_s)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["running", "open", "done"]),
            st.one_of(st.none(), st.integers(0, 4 * 3600)),
        ),
        max_size=12,
    ),
    hosts=st.lists(
        st.tuples(
            st.sampled_from([60.0, 1800.0, 7200.0]), st.one_of(st.none(), st.integers(0, 4 * 3600))
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_each_host_judged_in_one_query_agrees_with_it_judged_alone_and_the_oracle(
    runs, rows, hosts
):
    contract = contract_from_mapping({})
    table = [
        (i, status, None if ago is None else T0 - timedelta(seconds=ago), None)
        for i, (status, ago) in enumerate(rows)
    ]
    fill(runs, table)
    subjects = [
        subject(f"app{n}", lease_s, None if ago is None else T0 - timedelta(seconds=ago))
        for n, (lease_s, ago) in enumerate(hosts)
    ]
    together = judged_together(runs, subjects, contract)
    with connect(runs.dsn, contract.connect_timeout_s) as conn:
        for s, verdict in zip(subjects, together, strict=True):
            alone = evaluate(
                conn,
                contract,
                task_timeout=s.task_timeout,
                lease_s=s.lease_s,
                runtime_started_at=s.runtime_started_at,
                host=s.host,
                as_of=T0,
            )
            assert verdict.counts == alone.counts
            assert [c.id for c in verdict.live] == [c.id for c in alone.live]
            expected = {"live": 0, "stale": 0, "orphaned": 0, "queued": 0}
            for i, status, claimed_at, _ in table:
                cls = classify(
                    Row(i, status, claimed_at),
                    now=T0,
                    lease_s=s.lease_s,
                    claimed={"running"},
                    queued={"open"},
                    runtime_started_at=s.runtime_started_at,
                )
                if cls:
                    expected[cls] += 1
            assert vars(verdict.counts) == expected


def session_of(db, per_host, **kw):
    return GuardSession(contract_from_mapping({}), db.dsn, per_host, each=True, **kw)


def facts(started=None, timeout_s=HOUR):
    return RuntimeFacts(TaskTimeout(timeout_s, "given"), started)


def backends(db):
    return int(
        db.psql(
            "select count(*) from pg_stat_activity where application_name = 'leaseguard' "
            "and pid <> pg_backend_pid()"
        ).strip()
    )


def test_twenty_hosts_draining_at_once_share_one_backend_and_one_query_per_poll(runs):
    now = datetime.now(UTC)
    fill(runs, [(1, "running", now - timedelta(minutes=5), None)])
    per_host = {f"app{n:02d}": facts(now - timedelta(hours=1)) for n in range(20)}
    session = session_of(runs, per_host)
    polls = []
    judge_each = session.judge_each

    def counted():
        polls.append(1)
        return judge_each()

    session.judge_each = counted
    judge_for = shared_poll(session, fresh_s=0.5)
    rounds = 3
    start = threading.Barrier(len(per_host))
    seen = {}

    def drain(host):
        judge = judge_for(host)
        for _ in range(rounds):
            start.wait()
            seen.setdefault(host, []).append(judge().counts.live)
            start.wait()

    threads = [threading.Thread(target=drain, args=(h,)) for h in per_host]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert seen == {host: [1] * rounds for host in per_host}
        assert len(polls) == rounds  # one query per round for the twenty hosts
        assert backends(runs) == 1
    finally:
        session.close()


def test_a_host_that_already_took_the_last_poll_gets_a_new_one(runs):
    now = datetime.now(UTC)
    fill(runs, [(1, "running", now - timedelta(minutes=5), None)])
    session = session_of(runs, {"app1": facts(now - timedelta(hours=1)), "app2": facts(None)})
    try:
        judge = shared_poll(session, fresh_s=60)("app1")
        assert judge().counts.live == 1
        with runs.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done'")
        # Within the freshness window, but app1 saw that poll already: it is judged anew.
        assert judge().counts.live == 0
    finally:
        session.close()


def test_a_host_without_a_task_timeout_is_named(runs):
    with pytest.raises(ConfigError, match="host app2: a task timeout is required"):
        session_of(runs, {"app1": facts(), "app2": RuntimeFacts(None, None)})


class Path:
    """A path to the database that may be cut (stands in for one host's tunnel)."""

    def __init__(self, name):
        self.name, self.up = name, True

    def ensure(self, *, within_s=0.0):
        if not self.up:
            raise DatabaseUnavailable(f"{self.name} is down")

    def failure(self):
        return None

    def cut(self):
        pass


def test_the_connection_falls_over_to_the_next_path_and_stays_there(runs):
    now = datetime.now(UTC)
    fill(runs, [(1, "running", now - timedelta(minutes=5), None)])
    first, second = Path("app1"), Path("app2")
    first.up = False
    session = session_of(
        runs, {"app1": facts(), "app2": facts()}, link=first, fallbacks=[(runs.dsn, second)]
    )
    try:
        assert session.judge_each()["app1"].counts.live == 1
        assert session.link is second
        second.up = False
        session.close()  # the connection is lost: the next poll needs a path again
        first.up = True
        assert session.judge_each()["app2"].counts.live == 1
        assert session.link is first
        first.up = False
        session.close()
        with pytest.raises(DatabaseUnavailable, match="app1 is down"):
            session.judge_each()
    finally:
        session.close()


def drain_seventy(runs, options, during=None):
    """Seventy hosts (more than the bound on threads) drained on one session: the results,
    the seconds it took, the most threads alive at once."""
    now = datetime.now(UTC)
    fill(runs, [(1, "running", now - timedelta(minutes=5), None)])
    session = session_of(runs, {f"app{n:02d}": facts(now - timedelta(hours=1)) for n in range(70)})
    threads, done = [], threading.Event()

    def sample():
        while not done.wait(0.02):
            threads.append(threading.active_count())
            if during is not None and len(threads) == 25:  # about 0.5 s in
                during()

    sampler = threading.Thread(target=sample)
    sampler.start()
    began = time.monotonic()
    try:
        results = drain_each(session, options, StatusBoard(None, None))
    finally:
        took = time.monotonic() - began
        done.set()
        sampler.join()
        session.close()
    return results, took, max(threads)


def test_hosts_past_the_thread_bound_end_at_the_fleet_s_deadline_not_after_it(runs):
    # Hosts past the 64th used to begin their drain when the first 64 ended theirs: 70 hosts
    # with a 1 s deadline took 2 s (500 hosts and a two-hour lease: eight times two hours).
    results, took, threads = drain_seventy(runs, DrainOptions(poll_s=0.3, deadline_s=1.0))
    assert len(results) == 70 and {r.exit_status for r in results.values()} == {75}
    assert took < 1.7, took
    assert threads <= 64 + 8, threads  # a bounded pool, not a thread per host


def test_seventy_hosts_all_drain_when_the_claim_ends_mid_drain(runs):
    def end_claim():
        with runs.connect() as conn:
            conn.execute("UPDATE execution_runs SET status = 'done'")

    options = DrainOptions(poll_s=0.3, deadline_s=30.0)
    results, took, _ = drain_seventy(runs, options, during=end_claim)
    assert {r.exit_status for r in results.values()} == {0}
    assert all(r.counters.polls >= 1 for r in results.values())
    assert took < 5, took
