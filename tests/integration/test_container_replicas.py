"""Several replicas of a worker in real containers: filters, compose siblings, one variable.

`docker compose up --scale worker=2` is stood in for by `docker run` with compose's own labels
(com.docker.compose.project / .service) on the session's podman engine, driven through the
docker CLI (DOCKER_HOST) and the podman CLI alike. The judgments run through `leaseguard
check` against a real PostgreSQL.
"""

import http.client
import json
import secrets
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest

from leaseguard.adapters.runtime import LocalRunner, resolve_runtime_facts
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.lookups import parse_timestamp
from sandbox.runs_table import create_runs_table, insert_runs
from sandbox.subprocess_env import clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SECRET = "tok-" + "S3CRET-sibling-value"
SERVICE = "com.docker.compose.service"


@pytest.fixture
def engine_env(podman_engine, monkeypatch):
    for key, value in podman_engine.session_env.items():
        monkeypatch.setenv(key, value)
    return podman_engine.session_env


@pytest.fixture(scope="module")
def replicas(podman_engine):
    """Two running compose replicas of one service (the first started earlier, with the
    shorter timeout) and a stopped third; names and start times."""
    project = f"lg{secrets.token_hex(3)}"
    names = [f"{project}-worker-{i}" for i in (1, 2, 3)]
    labels = ["--label", f"com.docker.compose.project={project}", "--label", f"{SERVICE}=worker"]
    timeouts = {names[0]: "60", names[1]: "3600", names[2]: "9999"}
    try:
        for name in names:
            env = {"APP_TASK_TIMEOUT_S": timeouts[name], "SECRET_TOKEN": SECRET}
            podman_engine.run_backend(name, env=env, extra_args=labels)
            started = _started(podman_engine, name)
            # the next replica starts measurably later than this one
            assert wait_until(lambda s=started: datetime.now(s.tzinfo) > s + timedelta(seconds=1))
        podman_engine.docker("stop", "--time", "0", names[2])
        yield project, names, {name: _started(podman_engine, name) for name in names[:2]}
    finally:
        for name in names:
            podman_engine.remove(name)


def _started(engine, name):
    return parse_timestamp(engine.inspect(name)["State"]["StartedAt"], what=name)


def check(db, tmp_path, env, container, *, runtime=True):
    config = tmp_path / "lg.yaml"
    spec = {"source": "docker", "container": container}
    config.write_text(
        json.dumps(
            {
                "task_timeout": spec,
                "runtime": spec if runtime else {"source": "none"},
            }
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaseguard",
            "check",
            "--json",
            "--dsn",
            db.dsn,
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout or "{}"), done


def claim(db, claimed_at):
    with db.connect() as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", claimed_at, claimed_at)])


def test_a_claim_newer_than_a_siblings_start_defers_when_the_filter_names_every_replica(
    db, tmp_path, engine_env, replicas
):
    project, names, started = replicas
    # older than replica 2's start, newer than replica 1's: it may be running on replica 1
    claim(db, started[names[0]] + (started[names[1]] - started[names[0]]) / 2)
    status, verdict, done = check(db, tmp_path, engine_env, f"name=^{project}-worker-")
    assert status == 75, done.stderr
    assert verdict["counts"]["live"] == 1
    assert verdict["replicas"] == names[:2]  # the stopped third is no match
    assert parse_timestamp(verdict["runtime_started_at"], what="x") == started[names[0]]
    assert verdict["task_timeout_s"] == 3600.0


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_a_paused_replica_still_holds_its_claims(
    db, tmp_path, engine_env, replicas, podman_engine, engine
):
    """Paused, replica 1 is frozen, not gone: podman's `ps` left it out (and its inspect says
    Running false), so its claim looked orphaned by replica 2's start and the check proceeded."""
    project, names, started = replicas
    claim(db, started[names[0]] + (started[names[1]] - started[names[0]]) / 2)
    config = tmp_path / "lg.yaml"
    spec = {"source": engine, "container": f"name=^{project}-worker-"}
    config.write_text(json.dumps({"task_timeout": spec, "runtime": spec}))
    argv = [sys.executable, "-m", "leaseguard", "check", "--json", "--dsn", db.dsn]
    podman_engine.docker("pause", names[0])
    try:
        done = subprocess.run(
            [*argv, "--config", str(config)],
            capture_output=True,
            text=True,
            env=clean_env(**engine_env),
            timeout=60,
            check=False,
        )
    finally:
        podman_engine.docker("unpause", names[0])
    verdict = json.loads(done.stdout or "{}")
    assert (done.returncode, verdict.get("replicas")) == (75, names[:2]), done.stderr
    assert verdict["counts"]["live"] == 1


def test_naming_one_replica_judges_by_its_own_start_and_warns_naming_its_sibling(
    db, tmp_path, engine_env, replicas
):
    _project, names, started = replicas
    claim(db, started[names[0]] + (started[names[1]] - started[names[0]]) / 2)
    status, verdict, done = check(db, tmp_path, engine_env, names[1])
    assert status == 0, done.stderr  # by names[1]'s own start, an orphan
    assert verdict["counts"]["orphaned"] == 1
    [warning] = verdict["warnings"]
    assert f"has running compose siblings ({names[0]})" in warning
    assert names[2] not in warning  # stopped: not a sibling that can hold a claim
    assert f"label={SERVICE}=worker" in warning


def test_a_claim_older_than_every_replicas_start_is_an_orphan(db, tmp_path, engine_env, replicas):
    _project, names, started = replicas
    claim(db, started[names[0]] - timedelta(seconds=1))
    status, verdict, done = check(db, tmp_path, engine_env, f"label={SERVICE}=worker")
    assert status == 0, done.stderr
    assert verdict["counts"] == {"live": 0, "stale": 0, "orphaned": 1, "queued": 0}


def test_the_lease_is_the_longest_replicas_timeout(db, tmp_path, engine_env, replicas):
    project, names, _started = replicas
    claim(db, datetime.now().astimezone() - timedelta(minutes=5))
    # 5 minutes: stale by names[0]'s 60 s timeout (2 min lease), live by names[1]'s 3600 s
    status, verdict, _ = check(db, tmp_path, engine_env, f"name=^{project}-", runtime=False)
    assert (status, verdict["lease_s"]) == (75, 7200.0)
    status, verdict, _ = check(db, tmp_path, engine_env, names[0], runtime=False)
    assert (status, verdict["counts"]["stale"]) == (0, 1)


def test_a_filter_matching_no_running_container_fails_naming_it(db, tmp_path, engine_env, replicas):
    _project, names, _started = replicas
    status, result, _ = check(db, tmp_path, engine_env, f"name=^{names[2]}$")  # stopped
    assert status == 1
    assert f"no running container matches the filter name=^{names[2]}$" in json.dumps(result)


def test_the_podman_cli_reads_the_same_replicas(engine_env, replicas):
    project, names, started = replicas
    spec = {"source": "podman", "container": f"label=com.docker.compose.project={project}"}
    facts = resolve_runtime_facts(
        contract_from_mapping({"task_timeout": spec, "runtime": spec}), LocalRunner()
    )
    assert facts.replicas == tuple(names[:2])
    assert facts.runtime_started_at == started[names[0]]
    assert facts.task_timeout.seconds == 3600.0


class Recording(LocalRunner):
    def __init__(self):
        self.seen = []

    def run(self, argv):
        result = super().run(argv)
        self.seen.append((list(argv), result))
        return result


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_only_the_named_variable_leaves_the_host(engine_env, replicas, engine):
    project, _names, _started = replicas
    for container in (f"name=^{project}-", f"{project}-worker-1"):
        spec = {"source": engine, "container": container}
        runner = Recording()
        resolve_runtime_facts(
            contract_from_mapping({"task_timeout": spec, "runtime": spec}), runner
        )
        [(argv, result)] = runner.seen
        assert "SECRET_TOKEN" not in " ".join(argv)
        assert SECRET not in result.stdout + result.stderr
        assert "APP_TASK_TIMEOUT_S=" in result.stdout


def _create_by_api(engine, name, env):
    """A container made through the engine's API: a 10 MB variable fits no command line."""

    class Unix(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(str(engine.socket_path))

    body = {
        "Image": engine.image,
        "Cmd": ["sleep", "2147483647"],
        "Env": [f"{k}={v}" for k, v in env.items()],
        "HostConfig": {"NetworkMode": "none", "CgroupParent": f"/{engine.cgroup_parent}"},
    }
    for path, data in ((f"/containers/create?name={name}", json.dumps(body)), (None, None)):
        conn = Unix("localhost", timeout=60)
        target = path or f"/containers/{name}/start"
        conn.request("POST", f"/v1.41{target}", data, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status in (201, 204), response.read()[:200]
        conn.close()


def test_a_10_mb_sibling_variable_never_crosses_and_does_not_slow_the_lookup(
    podman_engine, engine_env
):
    name = f"lgbig{secrets.token_hex(3)}"
    _create_by_api(podman_engine, name, {"APP_TASK_TIMEOUT_S": "900", "BIG": "x" * 10_000_000})
    try:
        spec = {"source": "docker", "container": name}
        runner = Recording()
        began = time.monotonic()
        facts = resolve_runtime_facts(
            contract_from_mapping({"task_timeout": spec, "runtime": spec}), runner
        )
        elapsed = time.monotonic() - began
    finally:
        podman_engine.remove(name)
    assert facts.task_timeout.seconds == 900.0
    [(_argv, result)] = runner.seen
    assert len(result.stdout) < 1000  # the one variable's line, not 10 MB
    assert elapsed < 5, elapsed  # the whole environment took 13 s over SSH
