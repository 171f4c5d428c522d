"""A drain progress bar for terminals; plain logs (state changes only) elsewhere."""

from __future__ import annotations

import sys
from typing import TextIO

from leaseguard.core.verdict import Verdict


def _clock(seconds: float) -> str:  # H:MM:SS
    seconds = max(int(seconds), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class TerminalProgress:
    """One self-overwriting line: bar of the deadline used, live count, longest lease."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream, self.drawn = stream, False

    def update(self, verdict: Verdict, elapsed_s: float, deadline_s: float) -> None:
        filled = int((min(elapsed_s / deadline_s, 1.0) if deadline_s > 0 else 1.0) * 24)
        longest = verdict.live[0].remaining_s if verdict.live else 0.0
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (24 - filled)}] host={verdict.host or '-'} "
            f"live={verdict.counts.live} longest_lease={_clock(longest or 0)} "
            f"elapsed={_clock(elapsed_s)}/{_clock(deadline_s)}"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def progress_for(stream: TextIO) -> TerminalProgress | None:
    """A bar only where a person watches a terminal; None means plain state-change logs."""
    return TerminalProgress(stream) if stream.isatty() else None
