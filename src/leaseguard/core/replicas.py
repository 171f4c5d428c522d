"""Lookups that may match several replicas: a docker filter (`label=K=V`, `name=REGEX`:
running containers), a unit glob (active units). A claim may run on any of them: the cut-off is
the OLDEST start, the timeout the LONGEST. Only the one variable leaves the host (the
environment holds secrets), printed by `inspect --format`: no exec, nothing needed in the image.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from leaseguard.core.contract import Contract
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import ENV_NAME, Argv, env_value, parse_timestamp

COMPOSE_PROJECT = "com.docker.compose.project"
COMPOSE_SERVICE = "com.docker.compose.service"


def container_filter(container: str) -> str | None:
    """The docker filter `container` spells (`label=K=V`, `label=K`, `name=REGEX`), else None."""
    if not container.startswith(("label=", "name=")):
        return None
    kind, _, wanted = container.partition("=")
    if not wanted or wanted.startswith("="):
        # docker matches nothing for `label=` and everything for `name=`: neither is meant.
        raise LookupFailed(f"container filter {container!r} names no {kind}")
    return container


def is_unit_glob(unit: str) -> bool:
    return not frozenset("*?[").isdisjoint(unit)


def _template(variable: str | None) -> str:
    """One JSON line per container: name, state, start, compose labels, and only the ONE
    variable's entries (Go's `len`/`slice`/`eq` compare their `NAME=` prefix)."""
    env = ""
    if variable is not None:
        prefix = f"{variable}="
        n = len(prefix)
        env = (
            f"{{{{range .Config.Env}}}}{{{{if ge (len .) {n}}}}}"
            f'{{{{if eq (slice . 0 {n}) "{prefix}"}}}}{{{{json .}}}},'
            "{{end}}{{end}}{{end}}"
        )
    return (
        '{"name":{{json .Name}},"running":{{json .State.Running}},'
        '"started_at":{{json .State.StartedAt}},'
        f'"project":{{{{json (index .Config.Labels "{COMPOSE_PROJECT}")}}}},'
        f'"service":{{{{json (index .Config.Labels "{COMPOSE_SERVICE}")}}}},'
        f'"compose":{{{{if index .Config.Labels "{COMPOSE_PROJECT}"}}}}'
        f'{{{{if index .Config.Labels "{COMPOSE_SERVICE}"}}}}true{{{{else}}}}false{{{{end}}}}'
        "{{else}}false{{end}},"
        f'"env":[{env}null]}}'
    )


# $1 engine, $2 the container's name, $3 the template. The named container's line first;
# when it carries compose labels, the lines of every running compose container follow (its
# siblings are among them). A failed `ps` fails the lookup: the warning would be missing.
_NAMED_SCRIPT = """\
out=$("$1" inspect --type container --format "$3" "$2") || exit
printf '%s\\n' "$out"
case $out in *'"compose":true'*) ;; *) exit 0;; esac
ids=$("$1" ps -q --no-trunc --filter label=PROJECT --filter label=SERVICE) || exit
[ -z "$ids" ] || exec "$1" inspect --type container --format "$3" $ids
""".replace("PROJECT", COMPOSE_PROJECT).replace("SERVICE", COMPOSE_SERVICE)

# $1 engine, $2 the filter, $3 the template: one line per running match, none for no match.
_FILTER_SCRIPT = """\
ids=$("$1" ps -q --no-trunc --filter "$2") || exit
[ -z "$ids" ] || exec "$1" inspect --type container --format "$3" $ids
"""


def shared_variable(contract: Contract, *, timeout_looked_up: bool) -> str | None:
    """The timeout's variable when the runtime's container command can print it too."""
    timeout, runtime = contract.task_timeout, contract.runtime
    same = (timeout.source, timeout.container) == (runtime.source, runtime.container)
    if timeout_looked_up and same and ENV_NAME.fullmatch(timeout.variable):
        return timeout.variable
    return None


def container_argv(engine: str, container: str, variable: str | None) -> Argv:
    """The one command reading `container` (a name or a filter) and its `variable`."""
    script = _NAMED_SCRIPT if container_filter(container) is None else _FILTER_SCRIPT
    return ("sh", "-c", script, "sh", engine, container, _template(variable))


def shown_command(argv: Sequence[str]) -> str:
    """How a failed container command is named: `docker inspect`, `docker ps --filter ...`."""
    engine, target = argv[4], argv[5]
    if container_filter(target) is not None:
        return f"{engine} ps --filter {target}"
    return f"{engine} inspect"


@dataclass(frozen=True)
class Replica:
    name: str
    running: bool
    started_at: datetime
    compose: tuple[str, str]  # (project, service); empty strings when not compose's
    entries: tuple[str, ...]  # the variable's KEY=VALUE entries, nothing else

    def value(self, variable: str) -> str | None:
        return env_value(self.entries, variable)


@dataclass(frozen=True)
class Containers:
    matches: tuple[Replica, ...]
    siblings: tuple[str, ...] = ()


def read_containers(text: str, container: str, what: str) -> Containers:
    """The output of `container_argv`'s command, judged."""
    replicas = [_replica(line, what) for line in text.splitlines() if line.strip()]
    if container_filter(container) is not None:
        running = tuple(r for r in replicas if r.running)
        if not running:
            raise LookupFailed(f"{what}: no running container matches the filter {container}")
        return Containers(running)
    if not replicas:
        raise LookupFailed(f"{what}: inspect output is not a container description")
    named, others = replicas[0], replicas[1:]
    same_service = [r.name for r in others if r.running and r.compose == named.compose]
    siblings = sorted(set(same_service) - {named.name}) if named.compose[0] else []
    return Containers((named,), tuple(siblings))


def _replica(line: str, what: str) -> Replica:
    try:
        data = json.loads(line)
        name = str(data["name"]).lstrip("/")  # docker prints "/name", podman "name"
        running = data["running"] is True
        started_raw = data["started_at"]
        compose = (data["project"] or "", data["service"] or "")
        entries = tuple(e for e in data["env"] if isinstance(e, str))
    except (ValueError, KeyError, TypeError):
        raise LookupFailed(f"{what}: inspect output is not a container description") from None
    started = parse_timestamp(started_raw, what=f"{what} {name} StartedAt")
    return Replica(name, running, started, compose, entries)


def sibling_warning(what: str, found: Containers) -> str:
    named = found.matches[0]
    return (
        f"{what}: container {named.name} has running compose siblings "
        f"({', '.join(found.siblings)}) of service {named.compose[1]!r} (project "
        f"{named.compose[0]!r}) that may hold claims this judgment does not see; to judge "
        f"them all, name them with a filter: container: label={COMPOSE_SERVICE}={named.compose[1]}"
    )
