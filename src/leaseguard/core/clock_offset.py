"""A clock offset (one clock minus another) and how precisely it is known: pure arithmetic.

Measuring one takes I/O (leaseguard.adapters.clock); judging with one does not, so the fleet
rule (leaseguard.core.fleet) and the guard share this type without reaching into adapters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClockOffset:
    """host clock minus database clock, and how precisely that is known."""

    offset_s: float
    uncertainty_s: float

    def tolerance_s(self, configured_s: float) -> float:
        """The orphan tolerance to use: the configured one, widened to cover the offset."""
        return max(configured_s, abs(self.offset_s) + self.uncertainty_s)

    def exceeds(self, configured_s: float) -> bool:
        """True when the clocks certainly differ by more than the configured tolerance."""
        return abs(self.offset_s) - self.uncertainty_s > configured_s

    def warning(self, host: str, configured_s: float) -> str:
        direction = "ahead of" if self.offset_s > 0 else "behind"
        return (
            f"host {host} clock is {abs(self.offset_s):.3f}s {direction} the database clock "
            f"(clock_skew_s={configured_s:g}); the orphan cut-off tolerance was widened to "
            f"{self.tolerance_s(configured_s):.3f}s"
        )


def chained(host_minus_here: ClockOffset, here_minus_db: ClockOffset) -> ClockOffset:
    """host minus database, through this machine's clock; the uncertainties add up."""
    return ClockOffset(
        host_minus_here.offset_s + here_minus_db.offset_s,
        host_minus_here.uncertainty_s + here_minus_db.uncertainty_s,
    )
