"""A clock offset (one clock minus another) and how precisely it is known: pure arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

# Beyond this, this machine's (the controller's) clock is reported on every check: nothing
# is judged in it, but given start times and status files are read and written in it.
CONTROLLER_SKEW_BOUND_S = 5.0


@dataclass(frozen=True)
class ClockOffset:
    """One clock minus another (a host's, this machine's, the database's), and how precisely."""

    offset_s: float
    uncertainty_s: float

    def tolerance_s(self, configured_s: float) -> float:
        """The orphan tolerance, widened (never narrowed) to what the measurement cannot tell."""
        return max(configured_s, self.uncertainty_s)

    def exceeds(self, configured_s: float) -> bool:
        """True when the clocks certainly differ by more than the configured tolerance."""
        return abs(self.offset_s) - self.uncertainty_s > configured_s

    def warning(self, host: str, configured_s: float) -> str:
        return (
            f"host {host} clock is {abs(self.offset_s):.3f}s {_direction(self)} the database "
            f"clock (clock_skew_s={configured_s:g}); its runtime start was moved into the "
            "database clock for the orphan cut-off "
            f"(tolerance {self.tolerance_s(configured_s):.3f}s)"
        )


def _direction(offset: ClockOffset) -> str:
    return "ahead of" if offset.offset_s > 0 else "behind"


def controller_offset(db_reading_s: float, before_s: float, after_s: float) -> ClockOffset:
    """This machine's clock minus the database's, from a database reading taken between two
    readings of this machine's clock (the round trip bounds the uncertainty)."""
    return ClockOffset((before_s + after_s) / 2 - db_reading_s, (after_s - before_s) / 2)


def controller_warning(here_minus_db: ClockOffset) -> tuple[str, ...]:
    """The warning, if this machine's clock is certainly off by more than the bound."""
    if not here_minus_db.exceeds(CONTROLLER_SKEW_BOUND_S):
        return ()
    return (
        f"this machine's clock is {abs(here_minus_db.offset_s):.1f}s {_direction(here_minus_db)} "
        f"the database clock (more than {CONTROLLER_SKEW_BOUND_S:g}s): every judgment compares "
        "times in the database clock, but start times given here are read in this one; fix "
        "the clocks (NTP)",
    )


def chained(host_minus_here: ClockOffset, here_minus_db: ClockOffset) -> ClockOffset:
    """host minus database, through this machine's clock; the uncertainties add up."""
    return ClockOffset(
        host_minus_here.offset_s + here_minus_db.offset_s,
        host_minus_here.uncertainty_s + here_minus_db.uncertainty_s,
    )
