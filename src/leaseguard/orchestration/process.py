"""What a front's process does once, for its whole life."""

from __future__ import annotations

import atexit
import functools
import gc


@functools.cache  # once per process, however often a front starts in it (tests)
def no_collection_at_exit() -> None:
    """Leave the garbage collector out of the interpreter's clean-up at exit.

    A run imports psycopg, paramiko, Fabric and the rest (~48,000 objects the collector
    tracks). Tearing their modules down went through the collector once the work was done:
    ~110 ms on this project's CI machine (~20 ms frozen), added to every `fab` and
    `leaseguard` run and to the time a drain takes to exit once its last lease has ended
    (benchmarks/RESULTS.md). Frozen objects are skipped by the collector. Nothing at exit
    needs them collected: connections, tunnels and files are closed before it, and Python
    flushes stdout and stderr itself.
    """
    atexit.register(gc.freeze)
