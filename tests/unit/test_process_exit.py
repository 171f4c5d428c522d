"""`fab` and `leaseguard` leave the garbage collector out of their exit (issue 16).

Tearing down the modules a run imported went through the collector: ~90-130 ms after the
work was done, in every run and in a drain's reaction (benchmarks/RESULTS.md, item 4). Each
front freezes the collector's objects at exit (gc.freeze, an atexit handler); these check,
in a fresh interpreter, that the freeze happened by the time the exit's last handler runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Registered first, so it runs last (atexit is last-in, first-out): what the collector
# still tracks at the very end of the exit.
REPORT_AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print("FROZEN", gc.get_freeze_count(), file=sys.stderr))
"""

FRONTS = {
    "leaseguard index-sql": (
        "from leaseguard.cli import main\nmain(['index-sql', '--table', 'runs'])"
    ),
    "fab's collection": "from leaseguard.fabric.tasks import collection\ncollection()",
    "neither (the control)": "import leaseguard.cli.main, leaseguard.fabric.tasks",
}


def frozen_at_exit(body: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", REPORT_AT_EXIT + body],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    line = next(x for x in result.stderr.splitlines() if x.startswith("FROZEN "))
    return int(line.split()[1])


@pytest.mark.parametrize("front", FRONTS)
def test_a_front_freezes_the_collectors_objects_at_exit(front):
    frozen = frozen_at_exit(FRONTS[front])
    if front.startswith("neither"):
        assert frozen == 0  # importing alone changes nothing
    else:
        assert frozen > 10_000  # the imported modules' objects (~48,000 with Fabric)


def test_starting_a_front_twice_in_one_process_registers_the_freeze_once():
    import atexit

    from leaseguard.orchestration.process import no_collection_at_exit

    before = atexit._ncallbacks()
    no_collection_at_exit()
    no_collection_at_exit()
    assert atexit._ncallbacks() - before <= 1
