"""The judgment table (README.md, "The judgment") against a real PostgreSQL, in both directions.

Every rule is checked as "alive but left unprotected" AND "dead or queued but protected".
Boundary cases pin the database clock with `as_of` so they hold to the microsecond.
"""

from contextlib import closing
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaseguard.adapters.db import connect
from leaseguard.adapters.guard import lease_seconds
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import LookupFailed, UnclassifiedStatus
from leaseguard.core.fleet import ClockOffset, combine_facts
from leaseguard.core.verdict import Decision, RuntimeFacts, TaskTimeout
from leaseguard.orchestration.session import GuardSession
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.judging import evaluate
from tests.support.oracle import Host, Row, classify, classify_for_fleet, unclassified

pytestmark = pytest.mark.integration

HOUR = 3600.0
LEASE = 2 * HOUR
T0 = datetime(2026, 9, 9, 14, 48, 57, tzinfo=UTC)
STARTED = T0 - timedelta(hours=10)
TIMEOUT = TaskTimeout(HOUR, "given:task_timeout_s")


def ago(**kw):
    return T0 - timedelta(**kw)


@pytest.fixture
def runs(db):
    with db.connect() as conn:
        create_runs_table(conn)
    return db


def judge(db, rows, *, contract=None, started=STARTED, as_of=T0, lease_s=LEASE):
    contract = contract or contract_from_mapping({})
    with db.connect() as conn:
        conn.execute("TRUNCATE execution_runs")
        insert_runs(conn, rows)
    with connect(db.dsn, contract.connect_timeout_s) as conn:
        return evaluate(
            conn,
            contract,
            task_timeout=TIMEOUT,
            lease_s=lease_s,
            runtime_started_at=started,
            as_of=as_of,
        )


# --- the brief's cases --------------------------------------------------------------------


def test_a_run_claimed_30_minutes_ago_and_silent_since_is_protected(runs):
    verdict = judge(runs, [(1, "running", ago(minutes=30), ago(minutes=30))])
    assert verdict.decision is Decision.DEFER
    assert verdict.counts.live == 1
    assert verdict.live[0].id == "1"
    assert verdict.live[0].remaining_s == pytest.approx(LEASE - 30 * 60)


def test_the_naive_3_minute_window_would_have_called_that_run_dead(runs):
    """The contrast the guard exists for: the same row, protected by leaseguard's judgment,
    is dead to a query that trusts updated_at within 3 minutes."""
    verdict = judge(runs, [(1, "running", ago(minutes=30), ago(minutes=30))])
    assert verdict.decision is Decision.DEFER
    assert verdict.counts.live == 1
    naive = runs.psql(
        "select count(*) from execution_runs where status in ('running','open') "
        "and updated_at > now() - interval '3 minutes'"
    )
    assert naive.strip() == "0"


def test_updated_at_old_but_claimed_at_fresh_is_protected(runs):
    verdict = judge(runs, [(1, "running", ago(minutes=1), ago(hours=5))])
    assert verdict.counts.live == 1


def test_updated_at_fresh_but_lease_expired_does_not_block(runs):
    verdict = judge(runs, [(1, "running", ago(hours=3), ago(seconds=5))])
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1


def test_a_claim_past_its_lease_is_stale_and_does_not_block(runs):
    verdict = judge(runs, [(1, "running", ago(hours=2, seconds=1), ago(hours=2))])
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.stale == 1


def test_a_claim_older_than_the_runtime_start_is_an_orphan_and_does_not_block(runs):
    started = ago(minutes=10)
    verdict = judge(runs, [(1, "running", ago(minutes=20), ago(minutes=20))], started=started)
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.orphaned == 1


def test_a_claim_made_after_the_runtime_start_is_not_an_orphan(runs):
    started = ago(minutes=10)
    verdict = judge(runs, [(1, "running", ago(minutes=9), ago(minutes=9))], started=started)
    assert verdict.counts.live == 1


def test_without_a_runtime_start_nothing_is_classed_orphaned(runs):
    verdict = judge(runs, [(1, "running", ago(days=3650), None)], started=None, lease_s=1e9)
    assert verdict.counts.orphaned == 0
    assert verdict.counts.live == 1


def test_an_open_row_never_blocks_even_when_freshly_touched(runs):
    verdict = judge(runs, [(1, "open", ago(seconds=1), ago(seconds=1)), (2, "open", None, None)])
    assert verdict.decision is Decision.PROCEED
    assert verdict.counts.queued == 2


def test_finished_rows_are_not_looked_at(runs):
    verdict = judge(runs, [(1, "done", ago(seconds=1), ago(seconds=1))])
    assert vars(verdict.counts) == {"live": 0, "stale": 0, "orphaned": 0, "queued": 0}


def test_a_status_in_no_list_is_not_skipped_but_fails_the_check(runs):
    with pytest.raises(UnclassifiedStatus, match='"Running" \\(1 row\\)'):
        judge(runs, [(1, "Running", ago(minutes=1), None), (2, "done", None, None)])


def test_an_empty_table_proceeds(runs):
    verdict = judge(runs, [])
    assert verdict.decision is Decision.PROCEED
    assert verdict.wait_upper_bound_s == 0
    assert verdict.checked_at == T0


def test_a_mixed_table_gives_exact_counts_and_the_longest_remaining_lease(runs):
    rows = [
        (1, "running", ago(minutes=30), ago(minutes=30)),  # live, 90 min left
        (2, "running", ago(minutes=5), ago(minutes=5)),  # live, 115 min left
        (3, "running", ago(hours=3), ago(hours=3)),  # stale
        (4, "running", ago(hours=11), ago(hours=11)),  # orphaned (before runtime start)
        (5, "open", None, None),  # queued
        (6, "open", None, None),  # queued
        (7, "open", None, None),  # queued
        (8, "done", ago(minutes=1), ago(minutes=1)),  # ignored
    ]
    verdict = judge(runs, rows)
    assert vars(verdict.counts) == {"live": 2, "stale": 1, "orphaned": 1, "queued": 3}
    assert [c.id for c in verdict.live] == ["2", "1"]
    assert verdict.wait_upper_bound_s == pytest.approx(115 * 60)


def test_a_claimed_row_without_claimed_at_is_protected_because_it_cannot_be_proven_dead(runs):
    verdict = judge(runs, [(1, "running", None, None)])
    assert verdict.counts.live == 1
    assert verdict.live[0].remaining_s is None
    assert verdict.wait_upper_bound_s == LEASE


# --- boundaries ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (timedelta(seconds=LEASE) - timedelta(microseconds=1), "live"),
        (timedelta(seconds=LEASE) - timedelta(seconds=1), "live"),
        (timedelta(seconds=LEASE), "stale"),
        (timedelta(seconds=LEASE) + timedelta(microseconds=1), "stale"),
    ],
    ids=["1us-inside", "1s-inside", "exactly-at-expiry", "1us-outside"],
)
def test_lease_boundary(runs, age, expected):
    verdict = judge(runs, [(1, "running", T0 - age, None)])
    assert vars(verdict.counts)[expected] == 1


@pytest.mark.parametrize(
    ("offset", "skew_s", "expected"),
    [
        (timedelta(0), 0, "live"),
        (-timedelta(microseconds=1), 0, "orphaned"),
        (-timedelta(seconds=4), 5, "live"),
        (-timedelta(seconds=5), 5, "live"),
        (-timedelta(seconds=5, microseconds=1), 5, "orphaned"),
    ],
    ids=["at-start", "1us-before-start", "inside-skew", "at-skew-edge", "1us-past-skew"],
)
def test_orphan_boundary_with_clock_skew_tolerance(runs, offset, skew_s, expected):
    contract = contract_from_mapping({"clock_skew_s": skew_s})
    started = ago(minutes=30)
    verdict = judge(
        runs, [(1, "running", started + offset, None)], contract=contract, started=started
    )
    assert vars(verdict.counts)[expected] == 1


def test_the_real_database_clock_is_used_when_not_pinned(runs):
    with runs.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES "
            "(1, 'running', now() - interval '119 minutes'),"
            "(2, 'running', now() - interval '121 minutes')"
        )
    contract = contract_from_mapping({})
    with connect(runs.dsn, contract.connect_timeout_s) as conn:
        verdict = evaluate(
            conn, contract, task_timeout=TIMEOUT, lease_s=LEASE, runtime_started_at=None
        )
    assert verdict.counts.live == 1
    assert verdict.counts.stale == 1
    assert abs((datetime.now(UTC) - verdict.checked_at).total_seconds()) < 60


# --- per-row expiry column ----------------------------------------------------------------


def test_an_expiry_column_replaces_the_multiplier_rule_both_ways(runs):
    with runs.connect() as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at, lease_expires_at) VALUES "
            "(1, 'running', %(t)s - interval '5 hours', %(t)s + interval '1 minute'),"
            "(2, 'running', %(t)s - interval '1 minute', %(t)s - interval '1 second')",
            {"t": T0},
        )
    contract = contract_from_mapping({"lease": {"expires_at_column": "lease_expires_at"}})
    with connect(runs.dsn, contract.connect_timeout_s) as conn:
        verdict = evaluate(
            conn, contract, task_timeout=None, lease_s=None, runtime_started_at=None, as_of=T0
        )
    assert [c.id for c in verdict.live] == ["1"]  # old claim, but its lease was renewed
    assert verdict.counts.stale == 1  # fresh claim whose expiry has passed
    assert verdict.wait_upper_bound_s == 60.0


# --- property: the SQL agrees with a plain-Python oracle ----------------------------------

KNOWN = ["running", "busy", "open", "queued", "done", "failed"]
# A typo, a case slip, and a state the contract may or may not name as finished.
UNKNOWN = ["runing", "Running", "cancelled"]
row_strategy = st.tuples(
    st.one_of(st.sampled_from(KNOWN), st.sampled_from(UNKNOWN)),
    st.one_of(
        st.none(),
        st.integers(min_value=-4 * int(LEASE), max_value=60).map(
            lambda s: T0 + timedelta(seconds=s)
        ),
        st.sampled_from([T0 - timedelta(seconds=LEASE), STARTED, STARTED - timedelta(seconds=3)]),
    ),
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(row_strategy, max_size=25),
    started_offset_s=st.one_of(st.none(), st.integers(min_value=-3 * int(LEASE), max_value=0)),
    skew_s=st.sampled_from([0, 3, 30]),
    multiplier=st.sampled_from([1.0, 2.0, 2.5]),
    finished=st.sampled_from([None, ["done", "failed", "cancelled"], ["done"]]),
    indexed=st.booleans(),
    # Several statuses per list, one, none (each status is its own bound parameter).
    claimed_queued=st.sampled_from(
        [(["running", "busy"], ["open", "queued"]), (["running"], ["open"]), (["busy"], [])]
    ),
)
def test_sql_classification_matches_the_python_oracle(
    runs, rows, started_offset_s, skew_s, multiplier, finished, indexed, claimed_queued
):
    claimed, queued = claimed_queued
    contract = contract_from_mapping(
        {
            "claimed_statuses": claimed,
            "queued_statuses": queued,
            "finished_statuses": finished,
            "clock_skew_s": skew_s,
            "lease": {"multiplier": multiplier},
        }
    )
    with runs.connect() as conn:  # both ways of finding the statuses: index walk and scan
        conn.execute(
            "CREATE INDEX IF NOT EXISTS runs_status ON execution_runs (status)"
            if indexed
            else "DROP INDEX IF EXISTS runs_status"
        )
    lease_s = multiplier * HOUR
    started = None if started_offset_s is None else T0 + timedelta(seconds=started_offset_s)
    table = [(i, status, claimed_at, None) for i, (status, claimed_at) in enumerate(rows)]
    oracle_rows = [Row(i, status, claimed_at) for i, status, claimed_at, _ in table]
    lists = {"claimed": set(claimed), "queued": set(queued)}

    unknown = unclassified(oracle_rows, **lists, finished=set(contract.finished))
    if unknown:
        with pytest.raises(UnclassifiedStatus) as caught:
            judge(runs, table, contract=contract, started=started, lease_s=lease_s)
        message = str(caught.value)
        for status, n in unknown.items():
            assert f'"{status}" ({n} row{"" if n == 1 else "s"})' in message
        for status in {*KNOWN, *UNKNOWN} - set(unknown):
            assert f'"{status}"' not in message
        return
    verdict = judge(runs, table, contract=contract, started=started, lease_s=lease_s)

    expected = {"live": 0, "stale": 0, "orphaned": 0, "queued": 0}
    expected_live = set()
    for row in oracle_rows:
        cls = classify(
            row,
            now=T0,
            lease_s=lease_s,
            **lists,
            runtime_started_at=started,
            clock_skew_s=skew_s,
        )
        if cls:
            expected[cls] += 1
        if cls == "live":
            expected_live.add(str(row.id))
    assert vars(verdict.counts) == expected
    assert {c.id for c in verdict.live} == expected_live


# --- a measured host/database clock offset ------------------------------------------------


def judge_with_offset(db, claimed_at, started, offset_s, *, uncertainty_s=0.0, skew_s=0):

    contract = contract_from_mapping({"clock_skew_s": skew_s})
    with db.connect() as conn:
        conn.execute("TRUNCATE execution_runs")
        insert_runs(conn, [(1, "running", claimed_at, None)])
    with connect(db.dsn, contract.connect_timeout_s) as conn:
        return evaluate(
            conn,
            contract,
            task_timeout=TIMEOUT,
            lease_s=LEASE,
            runtime_started_at=started,
            as_of=T0,
            host="app1",
            clock_offset=ClockOffset(offset_s, uncertainty_s),
        )


def test_a_host_clock_ahead_of_the_database_does_not_orphan_a_claim_made_after_the_restart(runs):
    # The host says the runtime started at `started`, but its clock runs 30 s ahead: a claim
    # the database stamped 10 s "before" that start was in truth made 20 s after it.
    started = ago(minutes=30)
    verdict = judge_with_offset(runs, started - timedelta(seconds=10), started, 30.0)
    assert verdict.counts.live == 1
    assert "host app1 clock is 30.000s ahead of the database clock" in verdict.warnings[0]


@pytest.mark.parametrize("skew_s", [0, 5])
def test_round_trip_noise_never_orphans_a_claim_at_the_skew_edge(runs, skew_s):
    # The CLI measures its clock against the database's on every check: on one machine the
    # offset is noise within its uncertainty, either sign. A claim at exactly
    # runtime_started_at - clock_skew_s is not orphaned, whichever way the noise fell.
    started = ago(minutes=30)
    at_edge = started - timedelta(seconds=skew_s)
    for noise in (-0.003, 0.003):
        verdict = judge_with_offset(
            runs, at_edge, started, noise, uncertainty_s=0.003, skew_s=skew_s
        )
        assert verdict.counts.live == 1, noise
    # One second past the edge is still an orphan: the noise widens the tolerance, no more.
    verdict = judge_with_offset(
        runs, at_edge - timedelta(seconds=1), started, -0.003, uncertainty_s=0.003, skew_s=skew_s
    )
    assert verdict.counts.orphaned == 1


def test_a_widened_tolerance_still_orphans_claims_older_than_the_offset(runs):
    started = ago(minutes=30)
    verdict = judge_with_offset(runs, started - timedelta(seconds=31), started, 30.0)
    assert verdict.counts.orphaned == 1
    assert verdict.clock_offset_s == 30.0


# --- property: a random fleet, judged once, agrees with the oracle ------------------------

host_strategy = st.tuples(
    st.sampled_from([60.0, 600.0, HOUR, 2 * HOUR]),  # task timeout
    st.one_of(st.none(), st.integers(min_value=-3 * int(LEASE), max_value=0)),  # start offset
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    # Every status classified (the unclassified ones are the single-host property's part).
    rows=st.lists(row_strategy.filter(lambda row: row[0] in KNOWN), max_size=25),
    fleet=st.dictionaries(
        st.sampled_from(["app1", "app2", "app3", "app4"]), host_strategy, min_size=1
    ),
    skew_s=st.sampled_from([0, 3, 30]),
    multiplier=st.sampled_from([1.0, 2.0]),
    order=st.randoms(use_true_random=False),
)
def test_a_random_fleet_judged_once_agrees_with_the_oracle(
    runs, rows, fleet, skew_s, multiplier, order
):
    contract = contract_from_mapping(
        {
            "claimed_statuses": ["running", "busy"],
            "queued_statuses": ["open", "queued"],
            "clock_skew_s": skew_s,
            "lease": {"multiplier": multiplier},
        }
    )
    hosts = [
        Host(
            name, multiplier * timeout_s, None if offset is None else T0 + timedelta(seconds=offset)
        )
        for name, (timeout_s, offset) in fleet.items()
    ]
    listed = list(hosts)
    order.shuffle(listed)  # the decision must not depend on which host comes first
    combined = combine_facts(
        {
            h.name: RuntimeFacts(TaskTimeout(h.lease_s / multiplier, "fixed"), h.runtime_started_at)
            for h in listed
        }
    )
    table = [(i, status, claimed_at, None) for i, (status, claimed_at) in enumerate(rows)]
    verdict = judge(
        runs,
        table,
        contract=contract,
        started=combined.facts.runtime_started_at,
        lease_s=lease_seconds(contract, combined.facts.task_timeout),
    )

    expected = {"live": 0, "stale": 0, "orphaned": 0, "queued": 0}
    expected_live = set()
    for i, status, claimed_at, _ in table:
        row = Row(i, status, claimed_at)
        cls = classify_for_fleet(
            row,
            now=T0,
            hosts=hosts,
            claimed={"running", "busy"},
            queued={"open", "queued"},
            clock_skew_s=skew_s,
        )
        if cls:
            expected[cls] += 1
        if cls == "live":
            expected_live.add(str(i))
        # The fleet never leaves unprotected what any one host's own judgment protects.
        per_host = {
            classify(
                row,
                now=T0,
                lease_s=h.lease_s,
                claimed={"running", "busy"},
                queued={"open", "queued"},
                runtime_started_at=h.runtime_started_at,
                clock_skew_s=skew_s,
            )
            for h in hosts
        }
        assert "live" not in per_host or cls == "live"
    assert vars(verdict.counts) == expected
    assert {c.id for c in verdict.live} == expected_live


# --- a fleet's clocks: the orphan tolerance covers every host's offset --------------------


def judge_fleet_with_offsets(db, claimed_ago_s, starts_ago_s, offsets_s):
    """One fleet judgment at the real now(); each host's clock is `offsets_s` ahead of ours."""
    now = datetime.now(UTC)
    per_host = {
        name: RuntimeFacts(TIMEOUT, now - timedelta(seconds=ago_s))
        for name, ago_s in starts_ago_s.items()
    }
    with db.connect() as conn:
        conn.execute("TRUNCATE execution_runs")
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) "
            "VALUES (1, 'running', now() - make_interval(secs => %s))",
            (claimed_ago_s,),
        )
    offsets = {name: ClockOffset(offset, 0.0) for name, offset in offsets_s.items()}
    with closing(
        GuardSession(contract_from_mapping({}), db.dsn, per_host, host_offsets=offsets)
    ) as s:
        return s.judge()


def test_a_fleet_host_clock_ahead_of_the_database_does_not_orphan_a_claim_made_after_its_start(
    runs,
):
    # app2 started first, but by its own clock, 30 s fast: a claim 10 s "before" its start
    # was in truth made 20 s after it, and may be running on app2.
    verdict = judge_fleet_with_offsets(
        runs, 1800 + 10, {"app1": 600, "app2": 1800}, {"app1": 0.0, "app2": 30.0}
    )
    assert verdict.counts.live == 1
    assert verdict.fleet["orphan_cutoff_from"] == "app2"
    assert any("host app2 clock is" in warning for warning in verdict.warnings)


def test_a_fleet_host_clock_behind_the_database_does_not_make_its_start_look_later(runs):
    # The mirror: app2's clock is 30 s slow, so its start 1800 s ago by its clock was 1770 s
    # ago in truth. A claim 1790 s ago predates every runtime: an orphan, not protected.
    verdict = judge_fleet_with_offsets(
        runs, 1790, {"app1": 600, "app2": 1800}, {"app1": 0.0, "app2": -30.0}
    )
    assert verdict.counts.orphaned == 1
    assert verdict.fleet["orphan_cutoff_from"] == "app2"


def test_the_oldest_start_is_chosen_in_the_database_clock_not_as_the_hosts_read_it(runs):
    # By their own clocks app2 started first (1800 s ago against 1750 s), but app1's clock is
    # 100 s fast: it started 1850 s ago in truth, so the cut-off is app1's. A claim 1820 s
    # ago may be running on app1; one 1900 s ago predates both runtimes.
    offsets = {"app1": 100.0, "app2": 0.0}
    starts = {"app1": 1750, "app2": 1800}
    inside = judge_fleet_with_offsets(runs, 1820, starts, offsets)
    outside = judge_fleet_with_offsets(runs, 1900, starts, offsets)
    assert inside.counts.live == 1
    assert outside.counts.orphaned == 1
    assert inside.fleet["orphan_cutoff_from"] == outside.fleet["orphan_cutoff_from"] == "app1"
    assert set(outside.fleet["clock_offsets_s"]) == {"app1", "app2"}
    assert abs(outside.fleet["clock_offsets_s"]["app1"] - 100.0) < 1.0


def test_a_fleet_host_without_a_clock_reading_fails_closed_naming_it(runs):
    with pytest.raises(LookupFailed, match="host app2: no clock reading"):
        judge_fleet_with_offsets(runs, 60, {"app1": 600, "app2": 1800}, {"app1": 0.0})
