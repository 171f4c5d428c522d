"""What one database says about itself, read once for every host of a run that reaches it.

In `fab -H app1,...,app20 guard` every host is judged through its own tunnel, and usually
they all reach the fleet's one database. Its catalog facts - the schema pre-flight (table,
columns, row-level security, the status column), the plan advice and the leftover intake
pauses - are the same for every one of them, and on a fresh connection they are most of
what a check costs the server (benchmarks/RESULTS.md, item 3). So the first host to reach a
database reads them, and the others of the same run take its answer; what judges a host -
its status check, its counts, its live claims - still runs on every host, in its own
snapshot, with its own facts.

"The same database" is proven on every connection, never assumed from an address (each
host may reach a PostgreSQL of its own at 127.0.0.1:5432): the server's system identifier
and start time, the database, the role and its search_path. Only facts read without error
are kept: a failure is never handed on (the next host reads again, and fails on its own).
The facts are as old as the run, as a drain's are over its polls, and the judgment's own
statements still fail when a table or column vanished since (adapters.guard.judge_table).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from leaseguard.adapters.db import read_transaction, sent, translate_errors
from leaseguard.core.contract import Contract
from leaseguard.core.errors import LeaseguardError

log = logging.getLogger("leaseguard.shared_facts")
T = TypeVar("T")
DatabaseKey = tuple[object, ...]

# How long a host waits for another that is reading the same facts. Reading them takes
# milliseconds; a host whose own tunnel stalls must not hold the others up for its poll
# budget (they would fail for its fault): past this wait they read on their own.
WAIT_FOR_OTHER_HOST_S = 0.5

_WHICH_DATABASE = """
SELECT s.system_identifier, pg_postmaster_start_time(), current_database(), current_user,
       current_setting('search_path')
FROM pg_control_system() s
"""


def database_key(conn: psycopg.Connection[Any], contract: Contract) -> DatabaseKey | None:
    """Which server, database, role and search_path this connection reads (one round trip,
    which carries nothing else: the guard's transaction starts after it).

    None where the server will not say (a role denied pg_control_system(), as a managed
    service may deny it): that host reads its facts itself and shares nothing.
    """
    try:
        with translate_errors(contract), read_transaction(conn):
            cur = sent(conn, _WHICH_DATABASE)
        row = cur.fetchone()
    except LeaseguardError as exc:
        log.debug("database identity not readable (%s): facts not shared", type(exc).__name__)
        return None
    return None if row is None else tuple(row)


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    known: dict[str, Any] = field(default_factory=dict)

    def has(self, wanted: Collection[str]) -> bool:
        return set(wanted) <= self.known.keys()


class SharedFacts:
    """One run's per-database facts, shared by its hosts' sessions (one contract, one run)."""

    def __init__(self) -> None:
        self._slots: dict[DatabaseKey, _Slot] = {}
        self._slots_lock = threading.Lock()

    @contextmanager
    def database(self, key: DatabaseKey, wanted: Collection[str]) -> Iterator[dict[str, Any]]:
        """This database's facts known so far; held while the caller reads the `wanted`
        ones still missing and adds them (`once`).

        Hosts reaching the same database wait for each other (up to WAIT_FOR_OTHER_HOST_S),
        so the first reads and the rest reuse; once every wanted fact is known nobody
        waits. A host that waited in vain works on a copy: it reads for itself and keeps
        nothing.
        """
        with self._slots_lock:
            slot = self._slots.setdefault(key, _Slot())
        if slot.has(wanted):  # read by an earlier host: nobody waits
            yield slot.known
            return
        if not slot.lock.acquire(timeout=WAIT_FOR_OTHER_HOST_S):
            yield dict(slot.known)
            return
        if slot.has(wanted):  # the host it waited for read them all
            slot.lock.release()
            yield slot.known
            return
        try:
            yield slot.known  # this host reads what is missing, the others wait
        finally:
            slot.lock.release()


def once(known: dict[str, Any], name: str, read: Callable[[], T]) -> T:
    """`known[name]`, read (and kept) the first time; an exception keeps nothing."""
    if name not in known:
        known[name] = read()
    return known[name]  # type: ignore[no-any-return]
