"""One subject judged on a connection: the tests' shorthand for adapters.guard.judge_subjects."""

from __future__ import annotations

from typing import Any

from leaseguard.adapters.guard import Subject, judge_subjects


def judge_table(conn, contract, *, as_of=None, status_column=None, **subject: Any):
    """(verdict, status column) for one subject built from the other keywords (Subject's)."""
    subject.setdefault("host", None)
    verdicts, column = judge_subjects(
        conn, contract, [Subject(**subject)], as_of=as_of, status_column=status_column
    )
    return verdicts[0], column


def evaluate(conn, contract, **judged: Any):
    """`judge_table`'s verdict only."""
    return judge_table(conn, contract, **judged)[0]
