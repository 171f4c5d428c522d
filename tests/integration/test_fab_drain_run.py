"""`fab drain --run CMD`: CMD runs on the host after the verdict, intake still held.

Real `fab` over a real sshd (a network namespace whose 127.0.0.1:5432 is PostgreSQL with
pg_cron), and a busy intake claiming every 0.1 s while its job is active.
"""

import json
from datetime import datetime

import pytest

from tests.integration.test_fabric_tasks import fab, runs
from tests.support.busy_intake import BusyIntake, active, claims_between
from tests.support.busy_intake import intake_job as cron_intake

pytestmark = [pytest.mark.integration, pytest.mark.slow]

__all__ = ["fab", "runs"]  # fixtures used here


@pytest.fixture
def intake_job(runs):
    with cron_intake(runs, with_table=False) as job:  # `runs` made the table
        yield job


def clock_command(runs, out):
    """On the host: the database clock before and after a second's work, into `out`."""
    now = f"psql -h 127.0.0.1 -U postgres -d {runs.name} -XAtc 'select clock_timestamp()'"
    return f"{now} > {out} && sleep 1 && {now} >> {out}"


def test_no_claim_between_the_verdict_and_the_end_of_the_hosts_command(
    fab, runs, intake_job, backend, tmp_path
):
    out = tmp_path / "clock.txt"
    busy = BusyIntake(runs, intake_job)
    busy.start()
    try:
        done = fab(
            "drain",
            "--poll-s",
            "0.2",
            "--pause-cron-job",
            intake_job,
            "--json",
            "--run",
            clock_command(runs, out),
            drain={"cron_database": "postgres"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        [result] = [json.loads(line) for line in done.stdout.splitlines()]
        verdict_at = datetime.fromisoformat(result["verdict"]["checked_at"])
        _, end = (datetime.fromisoformat(line) for line in out.read_text().splitlines())
        assert end > verdict_at
        assert claims_between(runs, verdict_at, end) == 0
        assert result["action"]["exit_status"] == 0
        assert result["intake"] == {"held": True, "what": [f"pg_cron:{intake_job}"]}
        assert active(runs, intake_job)
    finally:
        busy.stop()
    assert busy.claims > 0


@pytest.mark.parametrize(
    ("command", "exit_status", "said"),
    [
        ("echo migrating; exit 3", 3, "exited 3"),
        # No exit status (paramiko: -1): failed, exit 1, not 255.
        ("kill -9 $$", 1, "ended without an exit status"),
    ],
    ids=["exit-3", "killed-by-a-signal"],
)
def test_a_failing_command_is_named_its_status_returned_and_intake_given_back(
    fab, runs, intake_job, backend, command, exit_status, said
):
    drain = ("drain", "--poll-s", "0.2", "--pause-cron-job", intake_job, "--run", command)
    done = fab(*drain, drain={"cron_database": "postgres"})
    assert done.returncode == exit_status, done.stdout + done.stderr
    assert said in done.stderr
    assert active(runs, intake_job)
    if exit_status == 3:
        assert "] migrating" in done.stderr and "command failed: " in done.stderr


def test_an_empty_command_is_a_usage_error_and_nothing_is_paused(fab, runs, intake_job):
    """`--run "$UNSET"`: never a drain reported done without the command it was given for."""
    done = fab("drain", "--pause-cron-job", intake_job, "--run", " ")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--run was given no command" in done.stderr
    assert "intake paused" not in done.stderr
    assert active(runs, intake_job)


def test_without_intake_the_command_is_not_said_to_run_with_intake_held(fab, runs, backend):
    done = fab("drain", "--poll-s", "0.2", "--run", "true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intake NOT held: running the command" in done.stderr
    assert "intake held: running" not in done.stderr
