"""Create and fill an execution_runs-like table for judgment tests."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql


def create_runs_table(conn: psycopg.Connection[Any], name: str = "execution_runs") -> None:
    conn.execute(
        sql.SQL(
            """
            CREATE TABLE {} (
                id bigint PRIMARY KEY,
                status text NOT NULL,
                claimed_at timestamptz,
                updated_at timestamptz,
                lease_expires_at timestamptz
            )
            """
        ).format(sql.Identifier(name))
    )


def insert_runs(
    conn: psycopg.Connection[Any],
    rows: Iterable[tuple[int, str, datetime | None, datetime | None]],
    name: str = "execution_runs",
) -> None:
    """rows: (id, status, claimed_at, updated_at)."""
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "INSERT INTO {} (id, status, claimed_at, updated_at) VALUES (%s, %s, %s, %s)"
            ).format(sql.Identifier(name)),
            list(rows),
        )
