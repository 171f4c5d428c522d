"""`make demo`: leaseguard's story, played for real on a throw-away local sandbox.

    .venv/bin/python scripts/demo.py [--keep] [--workdir DIR]     # make demo [KEEP=1]
    .venv/bin/python scripts/demo.py --down                       # make demo-down

The sandbox (sandbox/detached.py) is two app hosts (sshd in network namespaces, a
throw-away key), PostgreSQL 15 with pg_cron on the first host's loopback, a podman `backend`
container per host with APP_TASK_TIMEOUT_S=3600 and an `execution_runs` table. This script adds
the claim / compute / publish pg_cron jobs and then plays five steps with the real
`ansible-playbook`, `fab`, `psql` and `leaseguard`, their output streamed as it comes:

1. a claim silent for 10 minutes: the naive 3-minute guard says "safe", leaseguard defers;
2. only queued rows and a claim orphaned by a crash: the naive guard blocks, leaseguard
   restarts;
3. `fab drain` waits for a live claim that finishes during the drain;
4. pg_cron budgets: production keeps its 6 s publish override; the defaults report drift;
5. a busy intake (a claim every 0.1 s): deploy.yml holds it from before the verdict until
   each restart is verified, and no claim is taken in between.

Every step checks its outcome (exit status, the backend's start time, the rows, cron.job), so
the demo is also a test: it exits 1 when the story does not come true. Everything lives under
one temp directory, removed at the end with every process started for it, unless --keep
(then `make demo-down`, or `scripts/demo.py --down`, removes it; its path is in
build/demo-sandbox).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sandbox.ansible_env import ansible_env  # noqa: E402
from sandbox.netns import kill_pids, pid_alive, pids_with_cmdline_containing  # noqa: E402
from sandbox.subprocess_env import clean_env  # noqa: E402

DEFAULT_RECORD = REPO / "build" / "demo-sandbox"
HOSTS = ("app1", "app2")
VENV_BIN = REPO / ".venv" / "bin"
JUDGE_TASK = "Judge the claims by the system's own lease"
CRON_DATABASE = "postgres"  # pg_cron's cron.database_name in the sandbox

NAIVE_SQL = (
    "select count(*) from execution_runs where status='running' "
    "and updated_at > now() - interval '3 minutes'"
)
PIPELINE = {  # the stats projector's three steps: budget, function
    "claim": ("3s", "public.claim_stats_projection_job_v1"),
    "compute": ("60s", "public.compute_stats_projection_job_v1"),
    "publish": ("3s", "public.publish_stats_projection_job_v1"),
}


class DemoFailed(Exception):
    """The story did not come true: the message says what was expected and what happened."""


class Interrupted(BaseException):
    """SIGTERM: unwind like Ctrl-C so the sandbox is torn down."""


# -- output -----------------------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


def heading(title: str) -> None:
    say()
    say(f"=== {title} " + "=" * max(0, 86 - len(title)))


def ok(text: str) -> None:
    say(f"  ok: {text}")


def expect(condition: bool, what: str, actual: object = None) -> None:
    """One outcome the story depends on; a miss fails the demo naming it (and what was seen)."""
    if not condition:
        raise DemoFailed(what if actual is None else f"{what} (got {actual})")
    ok(what)


@dataclass
class Ran:
    returncode: int
    output: str


# -- the sandbox ------------------------------------------------------------------------------


@dataclass
class Demo:
    """One demo run: its directory, the sandbox's state, and how to run each tool."""

    dir: Path
    state: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    recap: list[tuple[str, str, str]] = field(default_factory=list)  # situation, naive, ours

    # paths and names
    @property
    def ansible_dir(self) -> Path:
        return self.dir / "ansible"

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yml"

    @property
    def budgets_file(self) -> Path:
        return self.dir / "budgets.yaml"

    @property
    def fabric_file(self) -> Path:
        return self.dir / "fabric.yaml"

    def host(self, alias: str) -> dict[str, Any]:
        return next(h for h in self.state["hosts"] if h["alias"] == alias)

    @property
    def containers(self) -> list[str]:
        return [h["container"] for h in self.state["hosts"]]

    def shown(self, argv: Sequence[str]) -> str:
        """The command as a person would type it: $DEMO for the temp dir, repo-relative paths."""
        text = " ".join(_quote(str(a)) for a in argv)
        return text.replace(str(self.dir), "$DEMO").replace(str(REPO) + "/", "")

    # environments
    def base_env(self, **extra: str) -> dict[str, str]:
        path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        return clean_env(PATH=path, **extra)

    def pg_env(self) -> dict[str, str]:
        """psql and `leaseguard budgets`: the database's superuser over its unix socket."""
        pg = self.state["pg"]
        return self.base_env(
            PGHOST=pg["socket_dir"],
            PGPORT=str(pg["port"]),
            PGUSER="postgres",
            PGDATABASE=pg["database"],
        )

    def ansible_env(self) -> dict[str, str]:
        """Repo ansible.cfg, a private ANSIBLE_HOME and ControlPath dir under $DEMO."""
        env = ansible_env(self.ansible_dir, ANSIBLE_DISPLAY_SKIPPED_HOSTS="false")
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        # The guard role's password: db_password falls back to PGPASSWORD on the controller.
        env["PGPASSWORD"] = self.state["pg"]["guard"]["password"]
        return env

    def docker_env(self) -> dict[str, str]:
        return self.base_env(**self.state["docker_env"])

    # running things
    def run(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        *,
        stderr_to_terminal: bool = False,
    ) -> Ran:
        """Show the command, stream its output as it comes (indented), and keep it."""
        say(f"$ {self.shown(argv)}")
        stderr = None if stderr_to_terminal else subprocess.STDOUT
        with subprocess.Popen(
            list(argv),
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            bufsize=1,
        ) as proc:
            assert proc.stdout is not None
            lines = []
            try:
                for line in proc.stdout:
                    lines.append(line)
                    print("  | " + line, end="", flush=True)
            except BaseException:
                proc.terminate()  # interrupted: do not leave it running into the teardown
                raise
        return Ran(proc.returncode, "".join(lines))

    def sql(self, query: str, params: Sequence[Any] = (), dbname: str | None = None) -> list[Any]:
        """The demo's own reads and writes (not shown): superuser over the unix socket."""
        pg = self.state["pg"]
        with psycopg.connect(
            host=pg["socket_dir"],
            port=pg["port"],
            user="postgres",
            dbname=dbname or pg["database"],
            autocommit=True,
        ) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def started_at(self) -> dict[str, str]:
        """Each backend's State.StartedAt, by docker's own account (not leaseguard's)."""
        done = subprocess.run(
            ["docker", "inspect", "--format", "{{.Name}} {{.State.StartedAt}}", *self.containers],
            env=self.docker_env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        pairs = (line.split() for line in done.stdout.splitlines() if line.strip())
        return {name.lstrip("/"): when for name, when in pairs}

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """lease_guard's task results of the last ansible-playbook run, by host."""
        report = json.loads((self.ansible_dir / "results.json").read_text())
        found: dict[str, dict[str, Any]] = {}
        for play in report["plays"]:
            for task in play["tasks"]:
                # A role's task is named "<role> : <name>".
                if task["task"]["name"].split(" : ")[-1] == JUDGE_TASK:
                    found.update(task["hosts"])
        return found


def _quote(arg: str) -> str:
    """shlex.quote, but SQL with single quotes reads better in double quotes."""
    if "'" in arg and not any(c in arg for c in '"$`\\!'):
        return f'"{arg}"'
    return shlex.quote(arg)


_TIMESTAMP = re.compile(r"(.+T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?")


def parse_time(text: str) -> datetime:
    """An ISO 8601 timestamp; docker's StartedAt has nanoseconds, Python reads microseconds."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        raise DemoFailed(f"not a timestamp: {text!r}")
    head, fraction, zone = match.groups()
    zone = "+00:00" if zone in (None, "Z") else zone
    return datetime.fromisoformat(f"{head}.{(fraction or '0')[:6]:0<6}{zone}")


def clock(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%H:%M:%SZ")


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


# -- set-up and tear-down ---------------------------------------------------------------------


def start_sandbox(demo: Demo) -> None:
    heading("The sandbox")
    say("Two app hosts (sshd in network namespaces, a throw-away key), PostgreSQL 15 with")
    say("pg_cron on app1's loopback (app2 reaches it at its own 127.0.0.1:5432), a podman")
    say("backend container per host with APP_TASK_TIMEOUT_S=3600, an execution_runs table.")
    say(f"Everything lives under DEMO={demo.dir}")
    pg_base = demo.dir / "pg"
    pg_base.mkdir(mode=0o755)
    argv = [sys.executable, "-m", "sandbox", "start", "--dir", str(demo.dir)]
    argv += ["--hosts", ",".join(HOSTS), "--pg-base-dir", str(pg_base)]
    ran = demo.run(argv, demo.base_env())
    if ran.returncode != 0:
        raise DemoFailed(f"the sandbox did not start (exit {ran.returncode})")
    demo.state = json.loads((demo.dir / "sandbox.json").read_text())
    for host in demo.state["hosts"]:
        say(f"  {host['alias']}: root@{host['addr']}, container {host['container']}")


def create_pipeline(demo: Demo) -> None:
    """No-op stand-ins for the stats projector's functions, and its three pg_cron jobs."""
    for _budget, function in PIPELINE.values():
        demo.sql(
            f"create or replace function {function}() returns void "
            "language plpgsql as $$ begin end $$"
        )
    budgets = {
        "cron_budgets": {
            "database": demo.state["pg"]["database"],
            "jobs": cron_jobs(),
            "overrides": {"production": {"publish": "6s"}},
        }
    }
    demo.budgets_file.write_text(yaml.safe_dump(budgets, sort_keys=False))
    say()
    say("The stats projector's claim / compute / publish steps run from pg_cron, each with a")
    say("statement budget set before the call. $DEMO/budgets.yaml declares the code's budgets")
    say("(claim 3s, compute 60s, publish 3s) and production's measured override (publish 6s).")
    say("psql and `leaseguard budgets` below reach the database as its superuser through")
    say("PGHOST/PGDATABASE; the guard itself logs in as the read-only role guard_pw.")
    say("Staging runs the code's budgets; schedule them as staging would:")
    argv = ["leaseguard", "budgets", "--config", str(demo.budgets_file)]
    ran = demo.run([*argv, "--cron-database", CRON_DATABASE, "--apply"], demo.pg_env())
    if ran.returncode != 0:
        raise DemoFailed(f"scheduling the pg_cron jobs failed (exit {ran.returncode})")


def stop_sandbox(directory: Path) -> bool:
    """Close ssh masters, stop the sandbox, sweep what is left; True when nothing remains."""
    for control in sorted((directory / "ansible" / "cp").glob("*")):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={control}", "-O", "exit", "demo"],
            capture_output=True,
            check=False,
            timeout=10,
        )
    argv = [sys.executable, "-m", "sandbox", "stop", "--dir", str(directory)]
    subprocess.run(argv, cwd=REPO, check=False, timeout=120)
    needle = str(directory) + "/"
    deadline = time.monotonic() + 10
    while (left := pids_with_cmdline_containing(needle)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        say(f"demo: {len(left)} process(es) still used {directory}; stopping them")
        kill_pids(left, timeout=5)
    clean = not [pid for pid in pids_with_cmdline_containing(needle) if pid_alive(pid)]
    shutil.rmtree(directory, ignore_errors=True)
    return clean and not left


def down(record: Path) -> int:
    """`make demo-down`: stop the sandbox a `make demo KEEP=1` left running."""
    try:
        directory = Path(record.read_text().strip())
    except OSError:
        say(f"demo-down: no kept demo sandbox ({record} does not exist)")
        return 0
    if not directory.is_absolute() or not directory.name.startswith("lgdemo-"):
        say(f"demo-down: {record} does not name a demo directory; remove it by hand")
        return 1
    clean = stop_sandbox(directory) if directory.exists() else True
    record.unlink(missing_ok=True)
    say(f"demo-down: removed {directory}" + ("" if clean else " (leftover processes killed)"))
    return 0 if clean else 1


# -- the story --------------------------------------------------------------------------------


def naive_guard(demo: Demo) -> int:
    say("The usual guard, a freshness window someone invented:")
    ran = demo.run(["psql", "-tAc", NAIVE_SQL], demo.pg_env())
    if ran.returncode != 0:
        raise DemoFailed("psql failed")
    return int(ran.output.strip())


def deploy(demo: Demo, *extra: str) -> Ran:
    argv = ["ansible-playbook", "-i", str(demo.inventory), "playbooks/deploy.yml", *extra]
    return demo.run(argv, demo.ansible_env())


def summarize(verdicts: dict[str, dict[str, Any]]) -> None:
    for host, verdict in sorted(verdicts.items()):
        say(f"  leaseguard_verdict[{host}]: {verdict.get('msg')}")
        for claim in verdict.get("live") or []:
            claimed = parse_time(claim["claimed_at"])
            say(
                f"    live claim {claim['id']}: claimed {clock(claimed)}, "
                f"lease ends in {duration(claim['remaining_s'])}"
            )


def step_silent_claim(demo: Demo) -> None:
    heading("1. A job claimed 10 minutes ago, silent since")
    demo.sql("delete from execution_runs")
    demo.sql(
        "insert into execution_runs (id, status, claimed_at, updated_at) values "
        "(101, 'running', now() - interval '10 minutes', now() - interval '10 minutes'), "
        "(102, 'open', null, null)"
    )
    say("Row 101 was claimed 10 minutes ago and has written nothing since: one long turn")
    say("running the whole test suite refreshes nothing until the turn ends. The system's own")
    say("contract: a claim lives for 2 x APP_TASK_TIMEOUT_S = 2 hours. Row 102 is queued.")
    say()
    count = naive_guard(demo)
    expect(count == 0, f'naive guard: {count} running row(s) touched in 3 minutes -> "safe"')
    say("  ...and the restart would kill row 101 in the middle of its turn.")
    say()
    say("The sandbox's backends started seconds ago, so by their real start time a claim from")
    say("10 minutes ago belongs to a runtime that no longer exists (orphaned). To play the")
    say("incident, this deploy is told the runtime has been up for an hour:")
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    runtime = {"source": "fixed", "started_at": hour_ago.strftime("%Y-%m-%dT%H:%M:%SZ")}
    before = demo.started_at()
    ran = deploy(demo, "-e", json.dumps({"leaseguard_runtime": runtime}))
    verdicts = demo.verdicts()
    summarize(verdicts)
    expect(
        ran.returncode == 2, "ansible-playbook failed the deferred host (exit 2)", ran.returncode
    )
    first = verdicts.get(HOSTS[0], {})
    expect(first.get("decision") == "defer", f"leaseguard deferred on {HOSTS[0]}")
    live = [c["id"] for c in first.get("live") or []]
    expect(live == ["101"], "the live claim it names is 101", live)
    expect(
        "not restarting app1: 1 live claim(s) in execution_runs (101)" in ran.output,
        "the refusal names the host and the claim",
    )
    expect(HOSTS[1] not in verdicts, f"the rollout stopped before {HOSTS[1]}")
    after = demo.started_at()
    expect(after == before, "no backend was restarted (docker inspect: StartedAt unchanged)")
    remaining = duration(first["live"][0]["remaining_s"])
    demo.recap.append(
        (
            "1. claimed 10 min ago, silent since",
            "safe: kills it",
            f"defer, lease ends in {remaining}",
        )
    )


def step_orphan(demo: Demo) -> None:
    heading("2. Only queued rows and a claim orphaned by an earlier crash")
    started = min(parse_time(t) for t in demo.started_at().values())
    heartbeat = started - timedelta(seconds=5)
    demo.sql("delete from execution_runs")
    demo.sql(
        "insert into execution_runs (id, status, claimed_at, updated_at) values "
        "(201, 'running', now() - interval '25 minutes', %s), "
        "(202, 'open', null, null), (203, 'open', null, null)",
        (heartbeat,),
    )
    say(f"Row 201 was claimed 25 minutes ago; its last heartbeat was at {clock(heartbeat)}, 5 s")
    say(f"before the backend (re)started at {clock(started)}: its worker died with the old")
    say("runtime and nobody runs it now. Rows 202 and 203 are queued: nobody holds them.")
    say()
    count = naive_guard(demo)
    expect(count == 1, f"naive guard: {count} running row(s) touched in 3 minutes -> blocked")
    say("  ...by a dead job: deploys stay blocked until someone edits the row by hand.")
    say()
    say("leaseguard reads each backend's real start time (docker inspect on the host):")
    before = demo.started_at()
    ran = deploy(demo)
    verdicts = demo.verdicts()
    summarize(verdicts)
    expect(ran.returncode == 0, "ansible-playbook succeeded", ran.returncode)
    for host in HOSTS:
        verdict = verdicts.get(host, {})
        counts = verdict.get("counts") or {}
        expect(
            verdict.get("decision") == "proceed"
            and counts == {"live": 0, "stale": 0, "orphaned": 1, "queued": 2},
            f"leaseguard proceeded on {host}: orphaned=1 queued=2, nothing live",
            counts,
        )
    after = demo.started_at()
    for name in demo.containers:
        expect(
            parse_time(after[name]) > parse_time(before[name]),
            f"{name} restarted (docker inspect: StartedAt moved forward)",
        )
    rows = demo.sql("select id, status from execution_runs order by id")
    expect(
        rows == [(201, "running"), (202, "open"), (203, "open")],
        "the guard wrote nothing (201 is the reaper's when its lease ends)",
    )
    demo.recap.append(
        ("2. orphan of a crash + queued rows", "blocked", f"proceed: restarted {', '.join(HOSTS)}")
    )


def step_drain(demo: Demo) -> None:
    heading("3. fab drain: wait for a live claim to finish")
    host = demo.host(HOSTS[0])
    demo.sql(
        "insert into execution_runs (id, status, claimed_at, updated_at) "
        "values (301, 'running', now(), now())"
    )
    write_fabric_file(demo)
    say("Row 301 was claimed a moment ago, after the restart: live. Before a maintenance")
    say(f"window, drain {HOSTS[0]}: pause intake (the pg_cron job `claim`), wait until no live")
    say("lease remains (never longer than the longest lease), resume intake. The claim")
    say("finishes a few seconds in. $DEMO/fabric.yaml:")
    for line in demo.fabric_file.read_text().replace(str(demo.dir), "$DEMO").splitlines():
        say(f"  {line}")
    finisher = Finisher(demo)
    finisher.start()
    try:
        argv = [*fab_argv(demo, host), "drain"]
        ran = demo.run(argv, demo.base_env(), stderr_to_terminal=sys.stderr.isatty())
    finally:
        finisher.done.set()
        finisher.join()
    expect(finisher.paused_seen, "the claim job was paused while the drain waited")
    expect(ran.returncode == 0, "fab drain exited 0 once the claim ended", ran.returncode)
    if not sys.stderr.isatty():
        expect("live 1 -> 0 ended=301" in ran.output, "the drain saw claim 301 end")
    [(active,)] = demo.sql(
        "select active from cron.job where jobname = 'claim'", dbname=CRON_DATABASE
    )
    expect(active is True, "the claim job is active again")
    waited = re.search(r"drained live=0 elapsed_s=([0-9.]+)", ran.output)
    how_long = f"{waited.group(1)} s" if waited else "until it ended"
    demo.recap.append(("3. fab drain, claim ends mid-drain", "-", f"waited {how_long}, exit 0"))


class Finisher(threading.Thread):
    """Plays the worker: once the drain has paused intake, finish claim 301 a little later."""

    def __init__(self, demo: Demo) -> None:
        super().__init__(name="finisher", daemon=True)
        self.demo = demo
        self.paused_seen = False
        self.done = threading.Event()  # the drain is over: stop playing

    def run(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.paused_seen:
            rows = self.demo.sql(
                "select active from cron.job where jobname = 'claim'", dbname=CRON_DATABASE
            )
            self.paused_seen = rows == [(False,)]
            if self.done.wait(0.1):
                return
        if self.done.wait(3):
            return
        self.demo.sql(
            "update execution_runs set status = 'done', updated_at = now() where id = 301"
        )


def step_migrate(demo: Demo) -> None:
    heading("4. Migrate: the guard's index, and pg_cron budgets with production's override")
    say("A 287-exercise account published in 4.449 s, so production runs publish with 6 s:")
    say("an override declared for production. The code and staging keep 3 s, and a routine")
    say("deploy must never silently put production back to 3 s.")
    say()
    say("This deploy's migration creates the index the guard's checks want:")
    ran = demo.run(["leaseguard", "index-sql"], demo.base_env())
    expect(ran.returncode == 0, "leaseguard index-sql printed the statement", ran.returncode)
    [index_sql] = [line for line in ran.output.splitlines() if line.startswith("CREATE INDEX")]
    database = demo.state["pg"]["database"]
    production = {
        "leaseguard_environment": "production",
        # The migration, run on the host; `psql` there reaches the database at 127.0.0.1.
        "leaseguard_migrate_command": [
            *("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", database),
            *("-v", "ON_ERROR_STOP=1", "-c", index_sql),
        ],
        "leaseguard_migrate_pause_cron_jobs": ["claim"],
        # Pausing and writing cron jobs needs their owner; the guard stays read-only.
        "leaseguard_migrate_db_user": "postgres",
        "leaseguard_cron_database": CRON_DATABASE,
        "leaseguard_cron_budgets": {"jobs": cron_jobs()},
        "leaseguard_cron_budget_overrides": {"publish": "6s"},
    }
    vars_file = demo.dir / "production.yml"
    vars_file.write_text(
        "# What production's group_vars hold for the migrate role (the jobs are the code's).\n"
        + yaml.safe_dump(production, sort_keys=False, width=1000)
    )
    say("$DEMO/production.yml, production's variables for the migrate role:")
    for line in vars_file.read_text().splitlines():
        say(f"  {line}")
    say()
    say("The deploy: migrate once (intake paused, claims judged, migration, budgets, intake")
    say("resumed), then the rolling restart. Row 201 is still the crash's orphan: proceed.")
    ran = deploy(demo, "-e", f"@{vars_file}")
    expect(ran.returncode == 0, "ansible-playbook succeeded", ran.returncode)
    expect(publish_budget(demo) == "6s", "publish 3s -> 6s, from the production override")
    expect(
        [budget for name, budget in live_budgets(demo) if name != "publish"] == ["3s", "60s"],
        "claim and compute keep the code's 3s and 60s",
    )
    indexes = demo.sql(
        "select indexname from pg_indexes where tablename = 'execution_runs' and indexname = %s",
        ("execution_runs_leaseguard_status",),
    )
    expect(len(indexes) == 1, "the migration created execution_runs_leaseguard_status")
    [(active,)] = demo.sql(
        "select active from cron.job where jobname = 'claim'", dbname=CRON_DATABASE
    )
    expect(active is True, "the claim job, paused for the migration, is active again")
    say()
    say("A deploy that only knows the code's defaults (staging's declaration) meets")
    say("production's 6 s:")
    argv = ["leaseguard", "budgets", "--config", str(demo.budgets_file)]
    argv += ["--cron-database", CRON_DATABASE, "--environment", "staging", "--apply"]
    drift = demo.run(argv, demo.pg_env())
    expect(drift.returncode == 3, "drift reported: exit 3", drift.returncode)
    expect(
        "job=publish live=6s declared=3s source=default state=drift" in drift.output,
        "publish: live 6s against the default 3s, reported and left untouched",
    )
    say("What pg_cron runs now:")
    query = "select jobname, schedule, command, database, active from cron.job order by jobid"
    demo.run(["psql", "-d", CRON_DATABASE, "-c", query], demo.pg_env())
    expect(publish_budget(demo) == "6s", "production still publishes with 6 s")
    demo.recap.append(
        (
            "4. deploy with production's 6s publish",
            "-",
            "migrated; 6s kept; defaults: drift, exit 3",
        )
    )


def write_fabric_file(demo: Demo) -> None:
    """$DEMO/fabric.yaml, for every host: their host keys in one known_hosts, their client
    keys under Fabric's connect_kwargs. Only the container differs per host (backend-app1,
    backend-app2 in one engine), so each fab command line names it (fab_argv)."""
    known_hosts = demo.dir / "known_hosts"
    known_hosts.write_text(
        "".join(Path(h["known_hosts_path"]).read_text() for h in demo.state["hosts"])
    )
    fabric = {
        "connect_kwargs": {"key_filename": [h["client_key_path"] for h in demo.state["hosts"]]},
        "leaseguard": {
            "connection": {
                # The drain pauses a pg_cron job, so it logs in as the jobs' owner; a guard
                # that only judges needs nothing but the read-only role.
                "dsn": f"dbname={demo.state['pg']['database']} user=postgres",
                "known_hosts": str(known_hosts),
            },
            "drain": {"poll_s": 0.5, "pause_cron_jobs": ["claim"], "cron_database": CRON_DATABASE},
        },
    }
    demo.fabric_file.write_text(yaml.safe_dump(fabric, sort_keys=False))


def fab_argv(demo: Demo, host: dict[str, Any]) -> list[str]:
    """`fab -f $DEMO/fabric.yaml -H root@ADDR` for one host, its container named through
    Fabric's environment variables (a key fabric.yaml leaves unset)."""
    container = host["container"]
    return [
        "env",
        f"FABRIC_LEASEGUARD_TASK_TIMEOUT_CONTAINER={container}",
        f"FABRIC_LEASEGUARD_RUNTIME_CONTAINER={container}",
        "fab",
        "-f",
        str(demo.fabric_file),
        "-H",
        f"root@{host['addr']}",
    ]


class Feeder(threading.Thread):
    """The busy intake: while pg_cron job `claim` is active (as pg_cron starts only active
    jobs), claims a row every 0.1 s; a worker finishes each claim 0.3 s later."""

    def __init__(self, demo: Demo) -> None:
        super().__init__(name="feeder", daemon=True)
        self.demo = demo
        self.done = threading.Event()
        self.claims = 0
        self.held_s: list[float] = []  # each span the job was seen paused

    def run(self) -> None:
        paused_since: float | None = None
        pg = self.demo.state["pg"]
        where = {"host": pg["socket_dir"], "port": pg["port"], "user": "postgres"}
        with (
            psycopg.connect(**where, dbname=CRON_DATABASE, autocommit=True) as cron,
            psycopg.connect(**where, dbname=pg["database"], autocommit=True) as app,
        ):
            next_id = 5000
            while not self.done.wait(0.1):
                app.execute(
                    "update execution_runs set status = 'done', updated_at = clock_timestamp() "
                    "where status = 'running' and claimed_at < clock_timestamp() - interval '0.3 s'"
                )
                row = cron.execute("select active from cron.job where jobname = 'claim'").fetchone()
                active = bool(row and row[0])
                if not active and paused_since is None:
                    paused_since = time.monotonic()
                elif active and paused_since is not None:
                    self.held_s.append(time.monotonic() - paused_since)
                    paused_since = None
                if active:
                    next_id += 1
                    app.execute(
                        "insert into execution_runs (id, status, claimed_at, updated_at) "
                        "values (%s, 'running', clock_timestamp(), clock_timestamp())",
                        (next_id,),
                    )
                    self.claims += 1


def step_busy_intake(demo: Demo) -> None:
    heading("5. A busy intake: held from before the verdict until the restart is verified")
    demo.sql("delete from execution_runs")
    say("The intake (pg_cron job `claim`) now claims a row every 0.1 s; each claim runs for")
    say("0.3 s. A verdict is true for an instant: a claim taken between a `proceed` and the")
    say("restart is live work the restart kills. So the restart role holds intake (records the")
    say("hold in cron.job, waits for runs already going) BEFORE its final verdict, judges, drains")
    say("(leaseguard_on_busy=wait), restarts, verifies the new start time, and only then gives")
    say("intake back. Intake is held as the jobs' owner (leaseguard_cron_user); the guard stays")
    say("its read-only role.")
    feeder = Feeder(demo)
    feeder.start()
    try:
        while feeder.claims < 10 and feeder.is_alive():
            time.sleep(0.05)
        before = demo.started_at()
        held = {
            "leaseguard_pause_cron_jobs": ["claim"],
            "leaseguard_cron_database": CRON_DATABASE,
            "leaseguard_cron_user": "postgres",
            "leaseguard_on_busy": "wait",
            "leaseguard_drain_poll_s": 0.2,
        }
        ran = deploy(demo, "-e", json.dumps(held))
        claims_before_end = feeder.claims
        deadline = time.monotonic() + 10
        while feeder.claims == claims_before_end and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        feeder.done.set()
        feeder.join()
    expect(ran.returncode == 0, "ansible-playbook succeeded", ran.returncode)
    verdicts, after = demo.verdicts(), demo.started_at()
    held_s = []
    for host in HOSTS:
        verdict, container = verdicts.get(host, {}), demo.host(host)["container"]
        expect(verdict.get("decision") == "proceed", f"{host}: proceed after the drain")
        intake = verdict.get("intake") or {}
        expect(intake.get("held") is True, f"{host}: the verdict says {intake.get('msg')}")
        start, end = parse_time(verdict["checked_at"]), parse_time(after[container])
        expect(end > parse_time(before[container]), f"{container} restarted")
        [(count,)] = demo.sql(
            "select count(*) from execution_runs where claimed_at > %s and claimed_at <= %s",
            (start, end),
        )
        expect(
            count == 0,
            f"{host}: 0 claims between the verdict ({clock(start)}) and the verified restart "
            f"({clock(end)}, {(end - start).total_seconds():.1f} s later)",
            count,
        )
        held_s.append((end - start).total_seconds())
    expect(feeder.claims > claims_before_end, "intake claims again after the last restart")
    spans = ", ".join(f"{span:.1f} s" for span in feeder.held_s)
    say(
        f"  intake held per restart: {spans} (verdict -> verified restart: "
        f"{', '.join(f'{v:.1f} s' for v in held_s)})"
    )
    demo.recap.append(
        (
            "5. busy intake, a claim every 0.1 s",
            "-",
            f"0 claims killed; intake held {spans}",
        )
    )


def cron_jobs() -> dict[str, dict[str, str]]:
    """The code's declaration of the pipeline's pg_cron jobs."""
    return {
        name: {"schedule": "* * * * *", "function": function, "budget": budget}
        for name, (budget, function) in PIPELINE.items()
    }


def live_budgets(demo: Demo) -> list[tuple[str, str | None]]:
    """(job, statement budget) as pg_cron will run them, in job order."""
    rows = demo.sql("select jobname, command from cron.job order by jobid", dbname=CRON_DATABASE)
    found = [(name, re.search(r"statement_timeout = '([^']+)'", command)) for name, command in rows]
    return [(name, match.group(1) if match else None) for name, match in found]


def publish_budget(demo: Demo) -> str | None:
    return dict(live_budgets(demo)).get("publish")


STEPS: tuple[Callable[[Demo], None], ...] = (
    step_silent_claim,
    step_orphan,
    step_drain,
    step_migrate,
    step_busy_intake,
)


# -- main -------------------------------------------------------------------------------------


def print_recap(demo: Demo) -> None:
    rows = [("situation", "naive 3-minute guard", "leaseguard"), *demo.recap]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for situation, naive, ours in rows:
        say(f"  {situation:<{widths[0]}}  {naive:<{widths[1]}}  {ours}")


def kept_instructions(demo: Demo) -> None:
    env_file = demo.dir / "demo-env.sh"
    pg = demo.pg_env()
    ansible = demo.ansible_env()
    lines = [
        "# Source me: the demo sandbox's tools (ansible, fab, psql, docker, leaseguard).",
        f"source {shlex.quote(str(demo.dir / 'env.sh'))}",
        f"export PATH={shlex.quote(str(VENV_BIN))}:$PATH",
        *(
            f"export {key}={shlex.quote(ansible[key])}"
            for key in ("ANSIBLE_CONFIG", "ANSIBLE_HOME", "ANSIBLE_SSH_CONTROL_PATH_DIR")
        ),
        *(f"export {key}={shlex.quote(pg[key])}" for key in ("PGHOST", "PGPORT", "PGDATABASE")),
        "export PGUSER=postgres",
    ]
    env_file.write_text("\n".join(lines) + "\n")
    heading("The sandbox is still running (KEEP=1)")
    say(f"It lives under {demo.dir}. In a shell:")
    say(f"  cd {REPO} && source {env_file}")
    say(f"  ansible-playbook -i {demo.inventory} playbooks/deploy.yml")
    for alias in HOSTS:
        say(f"  {shlex.join([*fab_argv(demo, demo.host(alias)), 'guard'])}")
    say(
        f"  leaseguard budgets --config {demo.budgets_file} --cron-database {CRON_DATABASE} "
        "--environment production"
    )
    say("  psql -c 'table execution_runs'")
    say(f"  docker ps                     # the backends: {', '.join(demo.containers)}")
    say("Stop it and remove everything: make demo-down")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running")
    parser.add_argument("--down", action="store_true", help="stop a kept sandbox and exit")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="use this new directory (its name must start with lgdemo-) instead of a fresh "
        "one under /tmp",
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=DEFAULT_RECORD,
        help="file naming the running sandbox's directory, for --down (default %(default)s)",
    )
    return parser.parse_args(argv)


def make_dir(workdir: Path | None) -> Path:
    if workdir is None:
        path = Path(tempfile.mkdtemp(prefix="lgdemo-", dir="/tmp"))
    else:
        path = workdir.resolve()
        if not path.name.startswith("lgdemo-"):
            raise SystemExit("demo: --workdir's name must start with lgdemo-")
        path.mkdir(mode=0o700)
    # The postgres OS user must traverse it to reach its cluster under $DEMO/pg.
    path.chmod(0o711)
    return path


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def sandbox_lifetime(directory: Path, record: Path, keep: bool) -> Iterator[None]:
    """Record the directory for demo-down; tear it all down at the end unless kept."""
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{directory}\n")
    try:
        yield
    finally:
        if not keep:
            say()
            say("Tearing the sandbox down...")
            clean = stop_sandbox(directory)
            record.unlink(missing_ok=True)
            say(f"removed {directory}" + ("" if clean else " (leftover processes were killed)"))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.down:
        return down(args.record)
    if args.record.exists():
        say("demo: a kept sandbox is still running; stopping it first")
        down(args.record)
    signal.signal(signal.SIGTERM, _on_sigterm)
    demo = Demo(make_dir(args.workdir))
    say("leaseguard demo: a deploy guard that borrows the protected system's own lease")
    try:
        with sandbox_lifetime(demo.dir, args.record, args.keep):
            start_sandbox(demo)
            create_pipeline(demo)
            for step in STEPS:
                step(demo)
            heading(f"Done in {time.monotonic() - demo.started:.0f} s: every step came true")
            print_recap(demo)
            if args.keep:
                kept_instructions(demo)
    except DemoFailed as exc:
        say(f"\ndemo FAILED: {exc}")
        status = 1
    except (KeyboardInterrupt, Interrupted):
        say("\ndemo interrupted")
        status = 130
    else:
        return 0
    if args.keep:
        say(f"The sandbox is still running under {demo.dir}; make demo-down removes it.")
    return status


if __name__ == "__main__":
    sys.exit(main())
