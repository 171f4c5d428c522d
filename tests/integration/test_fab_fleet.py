"""`fab` over a real fleet of 50 sshd hosts sharing one PostgreSQL: one backend, one query per
poll, every host judged from the start, output fit for tools, a fleet failure named once."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from sandbox.fleet import fleet
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.support.ansible_run import FIXED_FACTS, run_playbook, write_inventory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.hosts]

REPO = Path(__file__).resolve().parents[2]
JUDGE = "Judge the claims by the system's own lease"
SIZE = 50


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with fleet(tmp_path_factory.mktemp("fleet"), None, SIZE) as f:
        with f.db.connect(socket=True) as conn:
            create_runs_table(conn)
        yield f


@pytest.fixture
def claims(hosts):
    """The fleet's table, emptied; returns a function that runs SQL on it."""

    def run(statement, *params):
        with hosts.db.connect(socket=True) as conn:
            conn.execute(statement, params)

    run("TRUNCATE execution_runs")
    return run


def fab(hosts, tmp_path, targets, *args, table="execution_runs", background=False):
    config = tmp_path / "fabric.yaml"
    connection = {
        "dsn": "dbname=postgres user=postgres",
        "known_hosts": str(hosts.known_hosts),
        "db_host": hosts.db_addr,
        "db_port": hosts.db.port,
    }
    section = {
        "connection": connection,
        "table": table,
        "task_timeout": {"source": "fixed", "value_s": 3600},
        "runtime": {"source": "none"},
    }
    config.write_text(yaml.safe_dump({"leaseguard": section}))
    argv = [sys.executable, "-m", "fabric", "-f", str(config), "-i", str(hosts.key_path)]
    argv += ["-H", ",".join(targets), *args]
    if background:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    return subprocess.run(
        argv, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=180, check=False
    )


def polls(status):
    try:
        return json.loads(status.read_text())["counters"]["polls"]
    except (OSError, ValueError, KeyError):
        return 0


def guard_backends(hosts):
    return len(guard_clients(hosts))


def guard_clients(hosts):
    """The addresses the guard's backends came from (a host's, through its tunnel)."""
    with hosts.db.connect(socket=True) as conn:
        rows = conn.execute(
            "SELECT host(client_addr) FROM pg_stat_activity WHERE application_name = 'leaseguard'"
        ).fetchall()
    return [addr for (addr,) in rows]


class Sampler(threading.Thread):
    """The guard's backends on the database, sampled until stopped."""

    def __init__(self, hosts):
        super().__init__(daemon=True)
        self.hosts, self.seen, self.done = hosts, [], threading.Event()

    def run(self):
        while not self.done.wait(0.05):
            self.seen.append(guard_backends(self.hosts))


def test_fifty_hosts_drain_over_one_backend_and_print_one_object_a_line(hosts, claims, tmp_path):
    claims("INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())")
    sampler = Sampler(hosts)
    sampler.start()
    try:
        done = fab(
            hosts,
            tmp_path,
            hosts.targets(),
            "drain",
            "--poll-s",
            "0.3",
            "--deadline-s",
            "3",
            "--json",
            "--status-file",
            str(tmp_path / "drain.json"),
        )
    finally:
        sampler.done.set()
        sampler.join()
    assert done.returncode == 75, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]  # each line parses
    assert sorted(r["host"] for r in results) == sorted(hosts.targets())
    assert all(r["verdict"]["counts"]["live"] == 1 for r in results)
    # The status file's rows are each host's view; its total counts the one claim once.
    final = json.loads((tmp_path / "drain.json").read_text())
    assert [row["counts"]["live"] for row in final["drains"]] == [1] * SIZE
    assert final["counts"] == {"live": 1, "stale": 0, "orphaned": 0, "queued": 0}
    # Every host was judged from the first poll, and the polls were the fleet's, not a host's:
    # the drains of 50 hosts made about as many polls as one host's would.
    polls = [r["counters"]["polls"] for r in results]
    assert min(polls) >= 5 and max(polls) <= 3 / 0.3 + 2, polls
    assert max(sampler.seen) == 1 and 1 in sampler.seen, sampler.seen


def test_fifty_hosts_are_guarded_by_one_query(hosts, claims, tmp_path):
    claims("INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())")
    done = fab(hosts, tmp_path, hosts.targets(), "guard", "--json")
    assert done.returncode == 75, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert len(results) == SIZE and all(r["decision"] == "defer" for r in results)
    claims("UPDATE execution_runs SET status = 'done'")
    done = fab(hosts, tmp_path, hosts.targets(), "guard")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert sum("decision=proceed" in line for line in done.stdout.splitlines()) == SIZE


def test_a_bad_setting_is_named_once_and_each_host_says_it_was_not_judged(hosts, claims, tmp_path):
    targets = hosts.targets(20)
    done = fab(hosts, tmp_path, targets, "guard", table="no_such_table")
    assert done.returncode == 1
    assert done.stderr.count("does not exist") == 1, done.stderr
    assert "the fleet's judgment failed (SchemaMismatch)" in done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 20
    assert all("error=SchemaMismatch" in line and "was not judged" in line for line in lines)
    drained = fab(hosts, tmp_path, targets, "drain", "--json", table="no_such_table")
    assert drained.returncode == 1
    assert drained.stderr.count("the fleet's judgment failed (SchemaMismatch)") == 1
    results = [json.loads(line) for line in drained.stdout.splitlines()]
    assert len(results) == 20
    assert all("was not judged" in r["error"]["message"] for r in results)


def test_the_drain_falls_over_to_another_host_s_tunnel_when_the_first_host_goes_down(
    hosts, claims, tmp_path
):
    """The judgment runs through the first host's tunnel; that host's sshd is killed mid-drain:
    the next poll connects through the second host's, and the drain ends when the claim does."""
    claims("INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())")
    targets = sorted(hosts.targets(3))
    first = next(h for h in hosts.hosts if f"root@{h.addr}" == targets[0])
    status = tmp_path / "drain.json"
    proc = fab(
        hosts,
        tmp_path,
        targets,
        "drain",
        "--poll-s",
        "0.3",
        "--deadline-s",
        "60",
        "--json",
        "--status-file",
        str(status),
        background=True,
    )
    try:
        assert wait_until(lambda: polls(status) >= 2, timeout_s=60)  # mid-drain
        assert guard_clients(hosts) == [first.addr]
        first.sshd.stop()
        # The next poll's connection comes through another host's tunnel.
        moved = wait_until(lambda: guard_clients(hosts) not in ([], [first.addr]), timeout_s=30)
        if not moved:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError((guard_clients(hosts), first.addr, targets, err[-3000:]))
        assert len(guard_clients(hosts)) == 1
        claims("UPDATE execution_runs SET status = 'done'")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        first.sshd.start()
    assert proc.returncode == 0, stdout + stderr[-3000:]
    results = [json.loads(line) for line in stdout.splitlines()]
    assert [r["decision"] for r in results] == ["proceed"] * 3


def own_databases_config(hosts, tmp_path):
    """fabric.yaml for hosts each judged on the PostgreSQL at its own loopback (the default
    database address), every host's key known."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(h.known_hosts_path.read_text() for h in hosts))
    config = tmp_path / "fabric.yaml"
    section = {
        "connection": {"dsn": "dbname=postgres user=postgres", "known_hosts": str(known_hosts)},
        "task_timeout": {"source": "fixed", "value_s": 3600},
        "runtime": {"source": "none"},
    }
    config.write_text(yaml.safe_dump({"leaseguard": section}))
    return config


def fab_on_own_databases(busy, idle, tmp_path, *task):
    """`fab -H busy,idle TASK`, each host judged on the PostgreSQL at its own loopback: busy's
    holds a live claim, idle's none."""
    for host, live in ((busy, True), (idle, False)):
        with host.pg.connect(socket=True) as conn:
            create_runs_table(conn)
            if live:
                conn.execute(
                    "INSERT INTO execution_runs (id, status, claimed_at) "
                    "VALUES (1, 'running', now())"
                )
    config = own_databases_config([busy, idle], tmp_path)
    argv = [sys.executable, "-m", "fabric", "-f", str(config)]
    argv += ["-i", str(busy.client_key_path), "-i", str(idle.client_key_path)]
    argv += ["-H", f"root@{busy.addr},root@{idle.addr}", *task]
    return subprocess.run(
        argv, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120, check=False
    )


def test_hosts_each_with_their_own_database_at_their_loopback_are_judged_each_on_it(
    app_host_factory, tmp_path
):
    """The default database address, each host's own 127.0.0.1, may be a database per host:
    each host's is identified, and each host is judged on its own, never on another's."""
    busy, idle = app_host_factory("own1", pg=True), app_host_factory("own2", pg=True)
    done = fab_on_own_databases(busy, idle, tmp_path, "guard", "--json")
    assert done.returncode == 75, done.stdout + done.stderr[-3000:]
    decisions = {r["host"]: r["decision"] for r in json.loads(done.stdout)}
    assert decisions == {busy.addr: "defer", idle.addr: "proceed"}


def test_a_command_that_failed_on_one_host_is_not_reported_as_a_defer_of_another(
    app_host_factory, tmp_path
):
    """`fab drain --run`, each host on its own: the idle host drains and its command exits 3,
    the busy host defers. Exit 75 ("nothing done, try later") hid the failed command."""
    busy, idle = app_host_factory("cmd1", pg=True), app_host_factory("cmd2", pg=True)
    drain = ("drain", "--deadline-s", "1", "--poll-s", "0.2", "--run", "exit 3")
    done = fab_on_own_databases(busy, idle, tmp_path, *drain)
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    assert f"command failed: {idle.addr} exited 3" in done.stderr
    assert "decision=defer" in done.stdout


def test_a_status_file_totals_the_claims_of_every_host_s_own_database(app_host_factory, tmp_path):
    """Each host at its own loopback holds a live claim in a database of its own: two claims,
    and the status file's total says two (hosts sharing one database count its claims once)."""
    hosts = [app_host_factory(a, pg=True) for a in ("tot1", "tot2")]
    for host in hosts:
        with host.pg.connect(socket=True) as conn:
            create_runs_table(conn)
            conn.execute(
                "INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())"
            )
    config, status = own_databases_config(hosts, tmp_path), tmp_path / "drain.json"
    argv = [sys.executable, "-m", "fabric", "-f", str(config)]
    argv += [arg for h in hosts for arg in ("-i", str(h.client_key_path))]
    argv += ["-H", ",".join(f"root@{h.addr}" for h in hosts), "drain", "--deadline-s", "1"]
    argv += ["--poll-s", "0.2", "--status-file", str(status)]
    done = subprocess.run(argv, cwd=REPO, env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 75, done.stdout + done.stderr[-3000:]
    final = json.loads(status.read_text())
    assert [row["counts"]["live"] for row in final["drains"]] == [1, 1]
    assert final["counts"]["live"] == 2


def test_a_pg_cron_drain_over_hosts_with_their_own_databases_refuses_instead_of_judging_one(
    app_host_factory, tmp_path
):
    """Paused and judged as one fleet through the first host, the second host's database (its
    live claim, its pg_cron job) went unseen: exit 0. Now refused, nothing paused; one host at
    its own loopback still drains."""
    hosts = sorted((app_host_factory(a, pg=True) for a in ("mix1", "mix2")), key=lambda h: h.addr)
    idle, busy = hosts
    for host in hosts:
        with host.pg.connect(socket=True) as conn:
            create_runs_table(conn)
            conn.execute("SELECT cron.schedule('claim', '* * * * *', 'SELECT 1')")
            if host is busy:
                conn.execute(
                    "INSERT INTO execution_runs (id, status, claimed_at) "
                    "VALUES (1, 'running', now())"
                )
    config = own_databases_config(hosts, tmp_path)

    def drain(*targets):
        argv = [sys.executable, "-m", "fabric", "-f", str(config)]
        argv += [arg for h in hosts for arg in ("-i", str(h.client_key_path))]
        argv += ["-H", ",".join(f"root@{h.addr}" for h in targets), "drain"]
        argv += ["--deadline-s", "2", "--poll-s", "0.3", "--pause-cron-job", "claim"]
        return subprocess.run(argv, cwd=REPO, env=clean_env(), capture_output=True, text=True)

    done = drain(idle, busy)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "decision=failed error=ConfigError" in done.stdout
    assert "reach different databases" in done.stdout and "intake paused" not in done.stderr
    done = drain(idle)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "intake paused pg_cron job=claim" in done.stderr
    for host in hosts:
        with host.pg.connect(socket=True) as conn:
            assert conn.execute("SELECT bool_and(active) FROM cron.job").fetchone() == (True,)


def test_drain_yml_over_twenty_hosts_holds_one_backend(hosts, claims, tmp_path):
    """The same in Ansible: one task drains every host of the play, over one connection."""
    claims("INSERT INTO execution_runs (id, status, claimed_at) VALUES (1, 'running', now())")
    chosen = hosts.hosts[:20]
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {h.alias: h.ansible_host_vars() for h in chosen},
        leaseguard_db_host=hosts.db_addr,
        leaseguard_db_port=hosts.db.port,
        leaseguard_db_name="postgres",
        leaseguard_db_user="postgres",
        **FIXED_FACTS,
        leaseguard_drain_poll_s=0.3,
        leaseguard_drain_deadline_s=3,
    )
    sampler = Sampler(hosts)
    sampler.start()
    try:
        run = run_playbook("leaseguard.deploy.drain", inventory, tmp_path, "-f", "25")
    finally:
        sampler.done.set()
        sampler.join()
    assert run.returncode == 2, run.stdout[-3000:]  # the claim outlives the deadline
    judged = {h: r for h, r in run.results(JUDGE).items() if not r.get("skipped")}
    assert len(judged) == 1  # one task for the play
    verdicts = next(iter(judged.values()))["hosts"]
    assert sorted(verdicts) == sorted(h.alias for h in chosen)
    assert all(v["counts"]["live"] == 1 for v in verdicts.values())
    assert max(sampler.seen) == 1 and 1 in sampler.seen, sampler.seen
    assert all(run.stats[h.alias]["failures"] == 1 for h in chosen)
