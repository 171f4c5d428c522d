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
    verdict, error, done = result.verdict, result.error, result.action
    failed: Lines = [(False, f"drain failed: {error}")] if error is not None and not fab else []
    if as_json:
        out = {"host": host, **result.as_dict()} if fab else result.as_dict()
        return [(True, json.dumps(out)), *failed]
    lines: Lines = []
    if error is not None:
        lines.append((True, failure_output(error, host, as_json=False, fab=fab)))
    elif verdict is not None:
        lines.append((True, verdict.timeline()))
    action: Lines = [(False, f"{done.description}; {result.intake_line}")] if done else []
    warned = [(False, f"warning: {w}") for w in (verdict.warnings if verdict else ())]
    return lines + (warned + action if fab else action + failed + warned)
