"""adapters.db.composed: the guard's statements composed once, on a real PostgreSQL.

A drain runs the same statements every poll; composing one walks each identifier through
libpq's escaping. What is kept must be exactly what composing would send, for the contract
and the client encoding at hand, and never another contract's statement.
"""

from __future__ import annotations

import pytest
from psycopg import sql

from leaseguard.adapters.db import composed
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.predicate import counts_query, predicate_params
from sandbox.runs_table import create_runs_table, insert_runs

pytestmark = pytest.mark.integration


def _counting(build):
    calls = []

    def counted(*args):
        calls.append(args)
        return build(*args)

    return counted, calls


def test_a_statement_is_what_composing_sends_and_is_composed_once(db):
    contract = contract_from_mapping({})
    build, calls = _counting(counts_query)
    with db.connect() as conn:
        first = composed(conn, build, contract)
        again = composed(conn, build, contract)
        assert first == again == counts_query(contract).as_bytes(conn)
    assert len(calls) == 1


def test_each_contract_gets_its_own_statement(db):
    build, calls = _counting(counts_query)
    runs = contract_from_mapping({"table": "runs"})
    jobs = contract_from_mapping({"table": "jobs"})
    with db.connect() as conn:
        assert b'"runs"' in composed(conn, build, runs)
        assert b'"jobs"' in composed(conn, build, jobs)
        assert b'"runs"' in composed(conn, build, runs)
    assert len(calls) == 2


@pytest.mark.parametrize("encoding", ["UTF8", "LATIN1"])
def test_a_non_ascii_table_is_judged_in_every_client_encoding(db, encoding):
    """The kept bytes follow the client encoding: a LATIN1 session must not be sent the
    UTF-8 spelling composed for an earlier UTF-8 one (or the reverse)."""
    contract = contract_from_mapping({"table": "läufe"})
    with db.connect() as conn:
        create_runs_table(conn, "läufe")
        insert_runs(conn, [(1, "open", None, None)], "läufe")
        composed(conn, counts_query, contract)  # kept for this session's UTF8 first
        conn.execute(sql.SQL("SET client_encoding TO {}").format(sql.Literal(encoding)))
        statement = composed(conn, counts_query, contract)
        assert statement == counts_query(contract).as_bytes(conn)
        params = predicate_params(contract, lease_s=7200.0, runtime_started_at=None)
        rows = conn.execute(statement, params).fetchall()
    # in_recovery, live, stale, orphaned, queued
    assert [row[1:] for row in rows] == [(False, 0, 0, 0, 1)]
