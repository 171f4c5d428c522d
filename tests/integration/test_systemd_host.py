"""The systemd lookup and restart path against a real systemd (PID 1 of a podman container).

A unit whose Environment= holds the task timeout is looked up with `systemctl show` through
Ansible's ssh connection, and restarted by playbooks/deploy.yml (the restart role's runtime
drop-in carrying TimeoutStopSec, then `systemctl restart`, one shell script run by
leaseguard.deploy.runtime_restart). The drop-in must be gone after
the restart, also when the restart fails. See tests/support/systemd_host.py for the host.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.pgcluster import SUPERUSER
from sandbox.podman import PodmanEngine
from sandbox.runs_table import create_runs_table
from tests.support.ansible_run import run_playbook, write_inventory
from tests.support.pg_fixtures import PgDatabase
from tests.support.systemd_host import SystemdHost, import_systemd_image, open_systemd_host

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UNIT = "lgapp.service"
BARE_UNIT = "lgbare.service"
ENV_FILE_UNIT = "lgenvfile.service"
ENV_FILE = "/etc/lgenv.env"
TIMEOUT_S = 1800
DROP_IN_DIR = f"/run/systemd/system/{UNIT}.d"
DROP_IN = f"{DROP_IN_DIR}/50-leaseguard-stop.conf"
BROKEN_FLAG = "/run/lgapp-broken"
STOP_BUDGET_SEEN = "/run/lgapp-stop-budget"
# One ssh round trip per module instead of several (a common production setting too).
FAST_SSH = {"ANSIBLE_PIPELINING": "True"}
# ExecStop records the TimeoutStopSec in force while the unit stops (the drop-in's, during
# the role's restart); ExecStartPre fails while BROKEN_FLAG exists (a restart that fails).
UNITS = {
    UNIT: f"""
        [Service]
        Environment=APP_TASK_TIMEOUT_S={TIMEOUT_S} OTHER_SECRET=s3cret
        ExecStartPre=/bin/sh -c 'test ! -e {BROKEN_FLAG}'
        ExecStart=/bin/sleep infinity
        ExecStop=/bin/sh -c 'systemctl show {UNIT} -P TimeoutStopUSec > {STOP_BUDGET_SEEN}'
        """,
    BARE_UNIT: """
        [Service]
        ExecStart=/bin/sleep infinity
        """,
    # Environment= says 600, the EnvironmentFile= (read after it, overriding it) 14400; the
    # optional file ("-") that does not exist is skipped, as systemd skips it.
    ENV_FILE_UNIT: f"""
        [Service]
        Environment=APP_TASK_TIMEOUT_S=600
        EnvironmentFile=-/etc/lgenv-missing.env
        EnvironmentFile={ENV_FILE}
        ExecStart=/bin/sleep infinity
        """,
    # worker@1..N, as a template unit's replicas run; each instance's timeout is N x 100 s.
    "lgworker@.service": """
        [Service]
        Environment=APP_TASK_TIMEOUT_S=%i00 OTHER_SECRET=s3cret
        ExecStart=/bin/sleep infinity
        """,
}


@pytest.fixture(scope="module")
def systemd_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanEngine]:
    with PodmanEngine(tmp_path_factory.mktemp("podman-systemd"), build_image=False) as engine:
        import_systemd_image(engine)
        yield engine


@pytest.fixture(scope="module")
def sd_host(
    systemd_engine: PodmanEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SystemdHost]:
    with open_systemd_host(systemd_engine, tmp_path_factory.mktemp("sd1")) as host:
        for unit, text in UNITS.items():
            host.write_file(f"/etc/systemd/system/{unit}", textwrap.dedent(text))
        host.write_file(ENV_FILE, "OTHER_SECRET=s3cret\nAPP_TASK_TIMEOUT_S=7200\n")
        host.exec("sh", "-c", f"echo APP_TASK_TIMEOUT_S=14400 >> {ENV_FILE}")
        host.exec("systemctl", "daemon-reload")
        host.exec("systemctl", "start", UNIT, BARE_UNIT, ENV_FILE_UNIT)
        yield host


@pytest.fixture
def runs_db(db: PgDatabase) -> PgDatabase:
    with db.connect(socket=True) as conn:
        create_runs_table(conn)
    return db


def _inventory(tmp_path: Path, host: SystemdHost, db: PgDatabase, **extra: Any) -> Path:
    return write_inventory(
        tmp_path / "inventory.yml",
        {"sd1": host.ansible_host_vars()},
        leaseguard_task_timeout={
            "source": "systemd",
            "unit": UNIT,
            "variable": "APP_TASK_TIMEOUT_S",
        },
        leaseguard_runtime={"source": "systemd", "unit": UNIT},
        leaseguard_tunnel=False,
        leaseguard_db_host=db.cluster.host,
        leaseguard_db_port=db.cluster.port,
        leaseguard_db_name=db.name,
        leaseguard_db_user=SUPERUSER,
        **extra,
    )


def _lookup(tmp_path: Path, host: SystemdHost, db: PgDatabase, unit: str) -> Any:
    """The task_timeout module reading unit's variable and start time."""
    task = {
        "name": "lookup",
        "leaseguard.deploy.task_timeout": {
            "task_timeout": {"source": "systemd", "unit": unit, "variable": "APP_TASK_TIMEOUT_S"},
            "runtime": {"source": "systemd", "unit": unit},
        },
        "register": "lookup",
    }
    play = tmp_path / "lookup.yml"
    play.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "tasks": [task]}]))
    return run_playbook(play, _inventory(tmp_path, host, db), tmp_path)


def _active_since(host: SystemdHost, unit: str = UNIT) -> datetime:
    raw = host.exec(
        "systemctl", "show", unit, "--timestamp=us+utc", "-P", "ActiveEnterTimestamp"
    ).stdout.strip()
    return datetime.strptime(raw.partition(" ")[2], "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC)


def test_task_timeout_reads_the_units_environment_and_start_time(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    run = _lookup(tmp_path, sd_host, runs_db, UNIT)
    assert run.returncode == 0, run.stdout + run.stderr
    result = run.result("lookup", "sd1")
    assert result["task_timeout_s"] == TIMEOUT_S
    assert result["source"] == f"systemd:{UNIT}/APP_TASK_TIMEOUT_S"
    assert datetime.fromisoformat(result["runtime_started_at"]) == _active_since(sd_host)
    assert "s3cret" not in run.stdout + run.stderr + run.results_path.read_text()


def test_task_timeout_is_the_units_environment_file_assignment_that_overrides_environment(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    """The service runs with 14400 s (its EnvironmentFile's last line), not Environment='s
    600: with 600 the lease would be 20 minutes, and a live claim of an hour judged stale."""
    seen = sd_host.exec(
        "sh",
        "-c",
        f"tr '\\0' '\\n' < /proc/$(systemctl show -P MainPID "
        f"{ENV_FILE_UNIT})/environ | grep ^APP_TASK_TIMEOUT_S=",
    ).stdout
    assert seen.strip() == "APP_TASK_TIMEOUT_S=14400"  # what systemd gave the process
    run = _lookup(tmp_path, sd_host, runs_db, ENV_FILE_UNIT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.result("lookup", "sd1")["task_timeout_s"] == 14400
    assert "s3cret" not in run.stdout + run.stderr + run.results_path.read_text()


def test_an_environment_file_overrides_environment_and_no_other_variable_crosses_even_at_vvv(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    """systemd applies EnvironmentFile= after Environment=: the process runs with 7200, the
    lookup read 600 (a 20-minute lease for a 4-hour one); and `systemctl show`'s whole
    Environment= crossed the wire, which ansible -vvv prints."""
    unit = "lgenvfile.service"
    sd_host.write_file("/etc/lgenvfile.env", "APP_TASK_TIMEOUT_S=7200\nDB_SECRET=f1lesecret\n")
    sd_host.write_file(
        f"/etc/systemd/system/{unit}",
        textwrap.dedent(
            """
            [Service]
            Environment=APP_TASK_TIMEOUT_S=600 OTHER_SECRET=s3cret
            EnvironmentFile=/etc/lgenvfile.env
            EnvironmentFile=-/etc/lgenvfile-optional-absent.env
            ExecStart=/bin/sleep infinity
            """
        ),
    )
    sd_host.exec("systemctl", "daemon-reload")
    sd_host.exec("systemctl", "start", unit)
    task = {
        "name": "lookup",
        "leaseguard.deploy.task_timeout": {
            "task_timeout": {"source": "systemd", "unit": unit, "variable": "APP_TASK_TIMEOUT_S"},
            "runtime": {"source": "systemd", "unit": unit},
        },
    }
    play = tmp_path / "lookup.yml"
    play.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "tasks": [task]}]))
    run = run_playbook(play, _inventory(tmp_path, sd_host, runs_db), tmp_path, "-vvv")
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.result("lookup", "sd1")["task_timeout_s"] == 7200
    everything = run.stdout + run.stderr + run.results_path.read_text()
    assert "s3cret" not in everything and "f1lesecret" not in everything


def test_task_timeout_fails_naming_the_variable_a_unit_lacks(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    run = _lookup(tmp_path, sd_host, runs_db, BARE_UNIT)
    assert run.returncode == 2
    msg = run.result("lookup", "sd1")["msg"]
    assert f"systemd:{BARE_UNIT}/APP_TASK_TIMEOUT_S: variable APP_TASK_TIMEOUT_S is not set" in msg


def test_task_timeout_fails_on_a_stopped_unit(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    sd_host.exec("systemctl", "stop", BARE_UNIT)
    try:
        run = _lookup(tmp_path, sd_host, runs_db, BARE_UNIT)
    finally:
        sd_host.exec("systemctl", "start", BARE_UNIT)
    assert run.returncode == 2
    assert (
        f"systemd unit {BARE_UNIT} is not active (inactive)" in run.result("lookup", "sd1")["msg"]
    )


def test_a_unit_glob_judges_by_the_oldest_start_and_longest_timeout_of_the_active_units(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    workers = ["lgworker@1.service", "lgworker@2.service", "lgworker@3.service"]
    for unit in workers:  # one at a time: each starts after the one before
        sd_host.exec("systemctl", "start", unit)
    sd_host.exec("systemctl", "stop", workers[2])  # its 300 s would be the longest
    oldest = _active_since(sd_host, workers[0])
    assert oldest < _active_since(sd_host, workers[1])
    (tmp_path / "none").mkdir()
    try:
        run = _lookup(tmp_path, sd_host, runs_db, "lgworker@*.service")
        missing = _lookup(tmp_path / "none", sd_host, runs_db, "lgnone@*.service")
    finally:
        sd_host.exec("systemctl", "stop", *workers)
    assert run.returncode == 0, run.stdout + run.stderr
    result = run.result("lookup", "sd1")
    assert result["replicas"] == workers[:2]
    assert result["task_timeout_s"] == 200.0  # the longest of the active ones
    assert datetime.fromisoformat(result["runtime_started_at"]) == oldest
    assert "s3cret" not in run.stdout + run.stderr + run.results_path.read_text()
    assert missing.returncode == 2
    msg = missing.result("lookup", "sd1")["msg"]
    assert "no active systemd unit matches lgnone@*.service" in msg


RESTART = "Restart the runtime and check that its start time moved forward"


def _deploy(tmp_path: Path, host: SystemdHost, db: PgDatabase) -> Any:
    inventory = _inventory(tmp_path, host, db, leaseguard_restart_stop_timeout_s=7)
    return run_playbook("leaseguard.deploy.deploy", inventory, tmp_path, env=FAST_SSH)


def test_deploy_restarts_the_unit_with_the_stop_budget_drop_in_then_removes_it(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    before = _active_since(sd_host)
    sd_host.exec("rm", "-f", STOP_BUDGET_SEEN)
    run = _deploy(tmp_path, sd_host, runs_db)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
    assert _active_since(sd_host) > before
    result = run.result(RESTART, "sd1")
    assert datetime.fromisoformat(result["after"]["runtime_started_at"]) == _active_since(sd_host)
    assert result["msg"].endswith(", stop budget 7 s)"), result["msg"]
    # The drop-in was in force for the restart's stop, and is gone afterwards.
    assert sd_host.exec("cat", STOP_BUDGET_SEEN).stdout.strip() == "7s"
    assert sd_host.exec("test", "-e", DROP_IN, check=False).returncode == 1
    assert sd_host.exec("test", "-e", DROP_IN_DIR, check=False).returncode == 1
    assert sd_host.systemctl_show(UNIT, "DropInPaths") == ""
    assert sd_host.systemctl_show(UNIT, "TimeoutStopUSec") == "1min 30s"


def test_a_failed_restart_leaves_no_drop_in_behind(
    sd_host: SystemdHost, runs_db: PgDatabase, tmp_path: Path
) -> None:
    sd_host.exec("touch", BROKEN_FLAG)
    try:
        run = _deploy(tmp_path, sd_host, runs_db)
        state = sd_host.systemctl_show(UNIT, "ActiveState")
    finally:
        sd_host.exec("rm", "-f", BROKEN_FLAG)
        sd_host.exec("systemctl", "reset-failed", UNIT, check=False)
        sd_host.exec("systemctl", "start", UNIT)
    assert run.returncode == 2, run.stdout[-4000:]
    result = run.result(RESTART, "sd1")
    assert result["failed"] is True and result["restarted"]["rc"] != 0
    assert f"restarting sd1 with method systemd (unit {UNIT}) failed (rc " in result["msg"]
    assert state == "failed"
    assert sd_host.exec("test", "-e", DROP_IN, check=False).returncode == 1
    assert sd_host.exec("test", "-e", DROP_IN_DIR, check=False).returncode == 1
    assert sd_host.systemctl_show(UNIT, "DropInPaths") == ""
    assert sd_host.systemctl_show(UNIT, "TimeoutStopUSec") == "1min 30s"
