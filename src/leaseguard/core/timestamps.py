"""Timestamps as hosts and container engines print them, parsed strictly."""

from __future__ import annotations

import re
from datetime import datetime

from leaseguard.core.errors import LookupFailed


def parse_timestamp(text: str, *, what: str) -> datetime:
    """An RFC 3339 timestamp with a timezone; nanoseconds are cut to microseconds."""
    cleaned = str(text).strip()
    # Go's zero time (0001-01-01T00:00:00Z): docker's StartedAt of a container never started.
    if not cleaned or cleaned.startswith("0001-01-01"):
        raise LookupFailed(f"{what} is not set (never started?)")
    cleaned = cleaned.replace("Z", "+00:00").replace("z", "+00:00")
    cleaned = re.sub(r"\.(\d+)", lambda m: "." + m[1][:6].ljust(6, "0"), cleaned, count=1)
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise LookupFailed(f"{what} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise LookupFailed(f"{what} has no timezone")
    return moment
