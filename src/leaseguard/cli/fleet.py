"""Judging a fleet from the command line: several hosts' facts, one judgment.

A CI script that knows every app host's task timeout and runtime start (from its own
lookups, or the registered results of leaseguard.deploy.task_timeout) judges a migration
once for all of them with the fleet rule (`leaseguard.core.fleet`): oldest start, longest lease.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from leaseguard.core.errors import ConfigError
from leaseguard.core.fleet import facts_from_reports
from leaseguard.core.verdict import RuntimeFacts


def add_fleet_options(group: Any) -> None:
    """--host-facts and --facts-file, beside --task-timeout-s and --runtime-started-at."""
    group.add_argument(
        "--host-facts",
        action="append",
        metavar="HOST=TIMEOUT_S[,STARTED_AT]",
        help="one host of a fleet: its task timeout and (optionally) its runtime start "
        "(ISO 8601 with a timezone); repeat per host. The fleet is judged once: orphan "
        "cut-off = the oldest start, lease = the longest",
    )
    group.add_argument(
        "--facts-file",
        metavar="FILE",
        help="YAML or JSON mapping each host to {task_timeout_s, runtime_started_at} "
        "(registered leaseguard.deploy.task_timeout results fit as they are); judged "
        "like --host-facts",
    )


def fleet_from_args(args: argparse.Namespace) -> dict[str, RuntimeFacts] | None:
    """Every host's facts from --host-facts/--facts-file, or None when neither is given."""
    reports = {}
    if args.facts_file:
        reports.update(_read_facts_file(args.facts_file))
    for text in args.host_facts or ():
        host, report = _parse_host_facts(text)
        if host in reports:
            raise ConfigError(f"host {host} is given more than once (--host-facts/--facts-file)")
        reports[host] = report
    if not reports:
        return None
    if args.task_timeout_s is not None or args.runtime_started_at is not None:
        raise ConfigError(
            "--task-timeout-s/--runtime-started-at describe one host; with --host-facts or "
            "--facts-file give every host's facts there instead"
        )
    return facts_from_reports(reports)


def _parse_host_facts(text: str) -> tuple[str, dict[str, Any]]:
    host, sep, values = text.partition("=")
    timeout, _, started = values.partition(",")
    if not sep or not host.strip():
        raise ConfigError("--host-facts needs HOST=TIMEOUT_S[,STARTED_AT], e.g. app1=3600")
    return host.strip(), {
        "task_timeout_s": timeout.strip() or None,
        "runtime_started_at": started.strip() or None,
    }


def _read_facts_file(path: str) -> dict[str, Any]:
    import yaml  # only with --facts-file: a check given its facts does not load PyYAML

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read facts file {path} ({type(exc).__name__})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"facts file {path} is not YAML/JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"facts file {path} must map each host to its facts")
    for host, report in data.items():
        if not isinstance(report, dict):
            raise ConfigError(f"facts file {path}: host {host} must map to its facts")
    return {str(host): report for host, report in data.items()}
