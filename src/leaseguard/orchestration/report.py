"""What the fronts print for a failure and for a drain: (to_stdout, line) pairs, same bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from leaseguard.core.verdict import failure_result, failure_timeline
from leaseguard.orchestration.drain import DrainResult

Lines = list[tuple[bool, str]]  # True: to stdout; stderr lines go out as "leaseguard: <line>"


def failure_output(error: Exception, host: str, *, as_json: bool, fab: bool) -> str:
    """Fail closed: the failure's line (Fabric's with its reason) or JSON (the CLI's dated)."""
    now = datetime.now(UTC)
    if as_json:
        return json.dumps(failure_result(error, host, None if fab else now))
    line = failure_timeline(now, host, error)
    return f"{line} reason={json.dumps(str(error))}" if fab else line


def drain_lines(result: DrainResult, host: str, *, as_json: bool, fab: bool) -> Lines:
    """A failed drain reports its failure, never the last (stale) verdict before it."""
    verdict, error = result.verdict, result.error
    lines: Lines = []
    if as_json:
        lines.append(
            (True, json.dumps({"host": host, **result.as_dict()} if fab else result.as_dict()))
        )
    elif error is not None:
        lines.append((True, failure_output(error, host, as_json=False, fab=fab)))
    elif verdict is not None:
        lines.append((True, verdict.timeline()))
    action = (
        []
        if result.action is None or as_json
        else [(False, f"{result.action.description}; {result.intake_line}")]
    )
    if not fab:
        lines += action
        lines += [(False, f"drain failed: {error}")] if error is not None else []
    if verdict is not None and not as_json:
        lines += [(False, f"warning: {warning}") for warning in verdict.warnings]
    return lines + action if fab else lines
