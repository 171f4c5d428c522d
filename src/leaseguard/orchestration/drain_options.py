"""How to drain: the `drain:` config section beside the contract keys, shared by the fronts."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from leaseguard.adapters.pauses import drain_identity
from leaseguard.core.config_values import parse_command, reject_unknown
from leaseguard.core.errors import ConfigError
from leaseguard.orchestration.drain import DEFAULT_POLL_S
from leaseguard.orchestration.intake import DEFAULT_RESUME_RETRY_S
from leaseguard.orchestration.session import IntakeAccess


@dataclass(frozen=True)
class DrainOptions:
    poll_s: float = DEFAULT_POLL_S
    deadline_s: float | None = None
    pause_cron_jobs: tuple[str, ...] = ()
    cron_database: str | None = None
    cron_user: str | None = None  # the jobs' owner: pg_cron shows each role only its own
    cron_password: str | None = field(default=None, repr=False)
    pause_command: tuple[str, ...] = ()
    resume_command: tuple[str, ...] = ()
    status_file: str | None = None
    metrics_file: str | None = None
    resume_retry_s: float = DEFAULT_RESUME_RETRY_S

    def intake(self, front: str | None = None) -> IntakeAccess:
        """Where and as whom intake is held; `front` names this process's own drain."""
        owner = drain_identity(front) if front else None
        return IntakeAccess(self.cron_database, self.cron_user, self.cron_password, owner)


def drain_options(data: Mapping[str, Any] | None) -> DrainOptions:
    """Validate the `drain:` section; messages name the key."""
    data = dict(data or {})
    reject_unknown(data, frozenset(DrainOptions.__dataclass_fields__), prefix="drain.")
    jobs = data.get("pause_cron_jobs") or ()
    jobs = (jobs,) if isinstance(jobs, str) else jobs
    if not all(isinstance(j, str) and j for j in jobs):
        raise ConfigError("drain.pause_cron_jobs must be a list of job names")
    pause = parse_command(data, "pause_command", prefix="drain.")
    resume = parse_command(data, "resume_command", prefix="drain.")
    if bool(pause) != bool(resume):
        raise ConfigError("drain.pause_command and drain.resume_command go together")
    paths: dict[str, Any] = {}
    for key in ("status_file", "metrics_file"):
        value = data.get(key)
        if value not in (None, "") and not isinstance(value, str | PathLike):
            raise ConfigError(f"drain.{key} must be a file path")
        paths[key] = None if value in (None, "") else str(value)
    return DrainOptions(
        poll_s=_seconds(data, "poll_s", DEFAULT_POLL_S),
        deadline_s=_seconds(data, "deadline_s", None),
        pause_cron_jobs=tuple(jobs),
        cron_database=data.get("cron_database"),
        cron_user=data.get("cron_user") or None,
        cron_password=data.get("cron_password") or os.environ.get("LEASEGUARD_CRON_PASSWORD"),
        pause_command=pause,
        resume_command=resume,
        resume_retry_s=_seconds(data, "resume_retry_s", DEFAULT_RESUME_RETRY_S),
        **paths,
    )


def _seconds(data: Mapping[str, Any], key: str, default: float | None) -> Any:
    value = data.get(key)
    if value is None:
        return default
    try:
        if isinstance(value, str) and not value.isascii():
            raise ValueError  # float() reads any script's digits: ASCII only
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"drain.{key} must be a number of seconds") from None
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"drain.{key} must be greater than 0")
    return number
