import io
import time
from datetime import UTC, datetime

import pytest

from leaseguard.adapters.runtime import offset_from_here
from leaseguard.core.fleet import ClockOffset, controller_offset
from leaseguard.core.lookups import CommandResult
from leaseguard.core.verdict import Counts
from leaseguard.orchestration.drain import TerminalProgress
from tests.support.verdicts import make_verdict


def test_a_host_offset_is_its_clock_minus_this_machines():
    class Ahead:
        label = "app1"

        def run(self, argv):
            return CommandResult(0, f"{time.time() + 12.0:.6f}\n", "")

    offset = offset_from_here(Ahead())
    assert abs(offset.offset_s - 12.0) < 0.5 and offset.uncertainty_s < 0.5


def test_only_what_the_measurement_cannot_tell_widens_the_orphan_tolerance():
    """The offset itself moves the start into the database clock (judge_table)."""
    assert ClockOffset(12.0, 0.01).tolerance_s(0) == 0.01
    assert ClockOffset(-12.0, 0.01).tolerance_s(0) == 0.01
    assert ClockOffset(1.0, 0.01).tolerance_s(30) == pytest.approx(30.01)


def test_a_controller_clock_off_by_more_than_5_s_is_warned_about():
    behind = controller_offset(db_reading_s=1600.0, before_s=999.9, after_s=1000.1)
    assert behind.offset_s == -600.0 and behind.uncertainty_s == pytest.approx(0.1)
    [warning] = behind.controller_warning()
    assert warning.startswith("this machine's clock is 600.0s behind the database clock")
    assert controller_offset(1004.0, 999.9, 1000.1).controller_warning() == ()
    # Within the bound only because the round trip cannot tell: not warned.
    assert controller_offset(1005.5, 999.0, 1001.0).controller_warning() == ()


def test_a_skew_beyond_tolerance_is_reported():
    offset = ClockOffset(12.0, 0.01)
    assert offset.exceeds(0) and not offset.exceeds(30)
    assert "host app1 clock is 12.000s ahead of the database clock" in offset.warning("app1", 0)


def test_round_trip_noise_within_tolerance_is_not_reported():
    assert not ClockOffset(0.004, 0.005).exceeds(0)


def test_the_terminal_bar_shows_live_count_longest_lease_and_elapsed():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    verdict = make_verdict("1", remaining_s=5400.0, at=now, counts=Counts(live=2))
    stream = io.StringIO()
    bar = TerminalProgress(stream)
    bar.update(verdict, 2700.0, 5400.0)
    bar.close()
    assert stream.getvalue() == (
        "\r[############............] host=app1 live=2 longest_lease=1:30:00 "
        "elapsed=0:45:00/1:30:00\n"
    )
