"""`fab guard` / `fab drain` against real hosts: sshd in a network namespace, a podman
container driven through the docker CLI, and a PostgreSQL reachable only through the tunnel.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from sandbox.runs_table import create_runs_table
from tests.support.fab_run import run_fab
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs(app_db):
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
    return app_db


@pytest.fixture
def fab(app_host_pg, runs, tmp_path):
    """Runs `fab` as a user would, with a fabric.yaml holding the leaseguard section."""

    def run(*args, host=None, **leaseguard):
        section = {
            "connection": {
                "dsn": f"dbname={runs.name} user=postgres",
                "known_hosts": str(app_host_pg.known_hosts_path),
            },
            **leaseguard,
        }
        config = tmp_path / "fabric.yaml"
        config.write_text(yaml.safe_dump({"leaseguard": section}))
        host = host or f"root@{app_host_pg.addr}"
        key = str(app_host_pg.client_key_path)
        return run_fab("-f", str(config), "-i", key, "-H", host, *args)

    return run


def claim(db, row_id, status, age):
    with db.connect(socket=True) as conn:
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) "
            "VALUES (%s, %s, now() - %s::interval)",
            (row_id, status, age),
        )


def test_fab_list_shows_guard_and_drain_with_one_line_help():
    done = subprocess.run(
        [sys.executable, "-m", "fabric", "--list"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "guard" in done.stdout and "drain" in done.stdout


@pytest.mark.parametrize("host", ["root@", "root@:22", ":22"])
def test_a_host_string_without_a_host_is_a_usage_error_not_a_traceback(host):
    done = subprocess.run(
        [sys.executable, "-m", "fabric", "-H", host, "guard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "names no host" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["guard", "--bogus"], "No idea what '--bogus' is!"),
        (["drain", "--deadline-s"], "needed value and was not given one"),
        (["nosuchtask"], "No idea what 'nosuchtask' is!"),
    ],
)
def test_a_task_flag_fab_cannot_parse_is_a_usage_error_exit_2(args, said):
    done = subprocess.run(
        [sys.executable, "-m", "fabric", "-H", "app1", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr  # invoke's own status is 1: "the check failed"
    assert said in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--bogus", "guard"],
        ["--bogus", "-H", "app1", "guard"],
        ["-H", "app1", "--bogus=1", "drain"],
    ],
)
def test_an_unknown_flag_before_the_task_name_is_a_usage_error_exit_2(argv):
    """invoke's first pass leaves unknown flags to the task parse, which leaseguard wraps."""
    done = subprocess.run(
        [sys.executable, "-m", "fabric", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "No idea what '--bogus' is!" in done.stderr
    assert "Traceback" not in done.stderr


def test_restarting_the_container_turns_that_claim_into_an_orphan(
    fab, runs, backend, podman_engine
):
    claim(runs, 1, "running", "0 seconds")
    # StartedAt has second-level meaning here: the restart must come in a later second.
    with runs.connect(socket=True) as conn:
        later = (
            "SELECT date_trunc('second', clock_timestamp()) > max(claimed_at) FROM execution_runs"
        )
        assert wait_until(lambda: conn.execute(later).fetchone()[0], timeout_s=5)
    podman_engine.restart("backend")
    done = fab("guard", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    [verdict] = json.loads(done.stdout)
    assert verdict["counts"]["orphaned"] == 1
    assert verdict["runtime_started_at"] is not None
    assert abs(verdict["clock_offset_s"]) < 5


def test_queued_rows_and_orphans_proceed(fab, runs, backend):
    claim(runs, 1, "running", "1 day")
    claim(runs, 2, "open", "0 seconds")
    done = fab("guard")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "decision=proceed live=0 stale=0 orphaned=1 queued=1" in done.stdout


def test_several_hosts_report_one_line_each_and_the_worst_status(fab, runs, backend, app_host_pg):
    claim(runs, 1, "running", "0 seconds")
    hosts = f"root@{app_host_pg.addr},root@{app_host_pg.addr}:22,root@{app_host_pg.addr}:2"
    done = fab("guard", host=hosts)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3
    assert sum("decision=defer" in line for line in lines) == 2
    assert sum("decision=failed error=TunnelError" in line for line in lines) == 1
    assert done.returncode == 1


def test_a_claim_made_since_the_container_started_defers_on_a_host_named_twice_twice(
    fab, runs, backend, app_host_pg
):
    """Hosts are started before the guard reads its DSN; a repeated one starts again."""
    claim(runs, 1, "running", "0 seconds")
    done = fab("guard", host=f"root@{app_host_pg.addr},root@{app_host_pg.addr}")
    lines = done.stdout.strip().splitlines()
    assert [("decision=defer live=1" in line) for line in lines] == [True, True], done.stderr
    source = "lease_s=7200 source=docker:backend/APP_TASK_TIMEOUT_S"
    assert all(source in line for line in lines), done.stdout
    assert done.returncode == 75


def test_a_dsn_refused_after_the_hosts_started_is_a_usage_error(fab, runs, backend, app_host_pg):
    claim(runs, 1, "running", "0 seconds")
    bad = {"dsn": f"host=/run/postgresql dbname={runs.name} user=postgres"}
    done = fab("guard", connection={**bad, "known_hosts": str(app_host_pg.known_hosts_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "socket directory" in done.stderr
    assert "decision=" not in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("task_timeout", "message"),
    [
        ({"container": "nosuch"}, "docker container nosuch"),
        ({"variable": "NOT_CONFIGURED_S"}, "variable NOT_CONFIGURED_S is not set"),
    ],
    ids=["container-missing", "variable-missing"],
)
def test_lookup_faults_fail_closed_naming_what_failed(fab, runs, backend, task_timeout, message):
    done = fab("guard", task_timeout=task_timeout, runtime={"source": "none"})
    assert done.returncode == 1
    assert "decision=failed error=LookupFailed" in done.stdout
    assert message in done.stdout


def test_a_garbage_value_fails_closed_without_echoing_it(fab, runs, podman_engine):
    podman_engine.run_backend("garbage", env={"APP_TASK_TIMEOUT_S": "hunter2-secret"})
    try:
        done = fab("guard", task_timeout={"container": "garbage"}, runtime={"container": "garbage"})
    finally:
        podman_engine.remove("garbage")
    assert done.returncode == 1
    assert "is not a number of seconds" in done.stdout
    assert "hunter2-secret" not in done.stdout + done.stderr


def test_a_missing_variable_with_default_s_is_assumed_and_said_so(fab, runs, backend):
    claim(runs, 1, "running", "0 seconds")
    done = fab(
        "guard",
        task_timeout={"variable": "NOT_CONFIGURED_S", "default_s": 3600},
        runtime={"source": "none"},
    )
    assert done.returncode == 75
    assert "timeout_assumed=yes" in done.stdout


def test_a_wrong_host_key_fails_closed(fab, runs, backend, app_host_pg, tmp_path):
    other = tmp_path / "known_hosts"
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIHvJ0Qy0bQ8o8e1Qw6Hb9r7a1q0fZq8R8m0o9x8mZ0aA"
    other.write_text(f"{app_host_pg.addr} ssh-ed25519 {key}\n")
    done = fab(
        "guard", connection={"dsn": f"dbname={runs.name} user=postgres", "known_hosts": str(other)}
    )
    assert done.returncode == 1
    assert "host key does not match known_hosts" in done.stdout


def test_an_unknown_host_key_is_refused_unless_accepted_explicitly(fab, runs, backend):
    base = {"dsn": f"dbname={runs.name} user=postgres", "known_hosts": "/dev/null"}
    refused = fab("guard", connection=base)
    assert refused.returncode == 1
    assert "host key is not in known_hosts" in refused.stdout
    accepted = fab("guard", connection={**base, "accept_unknown_host_keys": True})
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


def test_a_wrong_database_password_never_reaches_the_output(fab, runs, backend):
    done = fab(
        "guard",
        connection={
            "dsn": f"dbname={runs.name} user=guard_pw password=s3cret-wrong-pw",
            "known_hosts": "/dev/null",
            "accept_unknown_host_keys": True,
        },
    )
    assert done.returncode == 1
    assert "DatabaseUnavailable" in done.stdout
    assert "s3cret-wrong-pw" not in done.stdout + done.stderr


def test_drain_over_ssh_exits_0_after_the_last_lease_ends(fab, runs, backend):
    claim(runs, 1, "running", "0 seconds")

    def finish():  # once the drain has seen the claim (fab's start-up takes seconds)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _saw_the_claim(runs):
            time.sleep(0.05)
        with runs.connect(socket=True) as conn:
            conn.execute("UPDATE execution_runs SET status = 'done'")

    finisher = threading.Thread(target=finish)
    finisher.start()
    done = fab("drain", "--poll-s", "0.2")
    finisher.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "live 1 -> 0 ended=1" in done.stderr
    assert "decision=proceed" in done.stdout
    # The timeline is leaseguard's own: no paramiko connection chatter among its lines.
    assert "Authentication" not in done.stderr
    assert "Connected (version" not in done.stderr


def _saw_the_claim(db):
    """The guard has finished a poll: its connection sits idle after reading the table."""
    with db.connect(socket=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leaseguard' "
            "AND datname = current_database() AND state = 'idle' AND query = 'COMMIT'"
        ).fetchone()
    return row[0] > 0


def test_drain_over_ssh_exits_75_at_the_deadline(fab, runs, backend, app_host_pg):
    claim(runs, 1, "running", "0 seconds")
    done = fab("drain", "--poll-s", "0.2", "--deadline-s", "1", "--json")
    assert done.returncode == 75, done.stdout + done.stderr
    [result] = [json.loads(line) for line in done.stdout.splitlines()]  # one object a line
    assert (result["host"], result["drained"]) == (f"root@{app_host_pg.addr}", False)
    # The check object's keys at the top, as `leaseguard drain --json` prints them.
    assert (result["decision"], result["counts"]["live"]) == ("defer", 1)
    assert isinstance(result["lease_s"], float) and isinstance(result["wait_upper_bound_s"], float)
    assert [claim["id"] for claim in result["live"]] == ["1"]


def test_a_tunnel_dropped_mid_drain_fails_closed_with_exit_1(app_host_factory, tmp_path):
    host = app_host_factory("drop1", pg=True)
    with host.pg.connect(socket=True) as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
        )
    config = tmp_path / "fabric.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "leaseguard": {
                    "connection": {
                        "dsn": "dbname=postgres user=postgres",
                        "known_hosts": str(host.known_hosts_path),
                    },
                    "task_timeout": {"source": "fixed", "value_s": 3600},
                    "runtime": {"source": "none"},
                }
            }
        )
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fabric",
            "-f",
            str(config),
            "-i",
            str(host.client_key_path),
            "-H",
            f"root@{host.addr}",
            "drain",
            "--poll-s",
            "0.2",
            # Failed polls end a drain after a tenth of its deadline: 0.5 s here.
            "--deadline-s",
            "5",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _has_leaseguard_session(host):
            time.sleep(0.05)
        host.sshd.stop()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, stdout + stderr
    assert "drain poll failed" in stderr
    assert "decision=failed" in stdout


def _has_leaseguard_session(host):
    with host.pg.connect(socket=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leaseguard'"
        ).fetchone()
    return row[0] > 0


def test_a_jump_host_gateway_is_used_and_its_host_key_verified(fab, runs, backend, app_host_pg):
    claim(runs, 1, "running", "0 seconds")
    connection = {
        "dsn": f"dbname={runs.name} user=postgres",
        "known_hosts": str(app_host_pg.known_hosts_path),
        "gateway": f"root@{app_host_pg.addr}",
    }
    done = fab("guard", connection=connection)
    assert done.returncode == 75, done.stdout + done.stderr
    refused = fab("guard", connection={**connection, "known_hosts": "/dev/null"})
    assert refused.returncode == 1
    assert "known_hosts" in refused.stdout
    unreachable_gateway = {**connection, "gateway": f"root@{app_host_pg.addr}:2"}
    assert fab("guard", connection=unreachable_gateway).returncode == 1


def test_a_two_hop_proxyjump_chain_reaches_the_host_through_both_hops(
    fab, runs, backend, app_host_pg
):
    """`a,b` is two hops (the host's own sshd twice here), not one host named "a,b"."""
    claim(runs, 1, "running", "0 seconds")
    hop = f"root@{app_host_pg.addr}"
    connection = {
        "dsn": f"dbname={runs.name} user=postgres",
        "known_hosts": str(app_host_pg.known_hosts_path),
        "gateway": f"{hop},{hop}",
    }
    done = fab("guard", connection=connection)
    assert done.returncode == 75, done.stdout + done.stderr
    # A hop that cannot be reached fails the check closed (the order of the hops is checked
    # by tests/unit/test_ssh_args.py: one sshd cannot tell which hop came first).
    broken_first = {**connection, "gateway": f"{hop}:2,{hop}"}
    failed = fab("guard", connection=broken_first)
    assert failed.returncode == 1, failed.stdout + failed.stderr


def test_fab_drain_pauses_named_cron_jobs_through_the_tunnel_and_resumes_them(
    fab, runs, backend, app_host_pg
):
    name = f"claim_{runs.name}"
    with app_host_pg.pg.connect(socket=True) as conn:
        conn.execute(
            "SELECT cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s)", (name, runs.name)
        )

    def active():
        with app_host_pg.pg.connect(socket=True) as conn:
            return conn.execute(
                "SELECT active FROM cron.job WHERE jobname = %s", (name,)
            ).fetchone()[0]

    claim(runs, 1, "running", "0 seconds")
    paused_seen = []

    def finish_once_paused():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and active():
            time.sleep(0.05)
        paused_seen.append(not active())
        with runs.connect(socket=True) as conn:
            conn.execute("UPDATE execution_runs SET status = 'done'")

    finisher = threading.Thread(target=finish_once_paused)
    finisher.start()
    done = fab(
        "drain", "--poll-s", "0.2", "--pause-cron-job", name, drain={"cron_database": "postgres"}
    )
    finisher.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert paused_seen == [True]
    assert active() is True


@pytest.mark.parametrize(
    ("args", "hint"),
    [(["gaurd"], "did you mean 'guard'?"), (["drain", "--deadline"], "'--deadline-s'?")],
)
def test_a_mistyped_task_or_flag_names_the_nearest_one(args, hint):
    done = run_fab("-H", "app1", *args, timeout=60)
    assert done.returncode == 2, done.stderr
    assert hint in done.stderr


def test_fab_resume_keeps_a_running_holders_hold_until_forced(fab, runs, app_host_pg):
    """`fab resume` keeps a hold whose holder still runs (this test process), exit 75 naming
    it; `fab resume --force` gives it back."""
    import os

    from leaseguard.adapters.pauses import hold_jobs

    name = f"claim_{runs.name}"
    with app_host_pg.pg.connect(socket=True) as conn:
        conn.execute(
            "SELECT cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s)", (name, runs.name)
        )
        hold_jobs(conn, [name], "fab drain pid here", "deploy", os.getpid())

    def active():
        with app_host_pg.pg.connect(socket=True) as conn:
            row = conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (name,))
            return row.fetchone()[0]

    drain = {"cron_database": "postgres"}
    kept = fab("resume", drain=drain)
    assert kept.returncode == 75, kept.stdout + kept.stderr
    assert f"job={name} state=kept" in kept.stdout and "is still running" in kept.stdout
    assert active() is False
    forced = fab("resume", "--force", drain=drain)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"job={name} state=resumed" in forced.stdout
    assert active() is True
