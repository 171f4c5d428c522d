"""5. Ansible overhead: `playbooks/deploy.yml` (look up, judge, restart, verify) against a
one-task `docker restart` play, as whole `ansible-playbook` processes, interleaved, on one
sandbox host (`python -m sandbox`) whose rows nobody runs, so the deploy proceeds."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.common import (
    REPO,
    Finding,
    Section,
    fmt_ratio,
    fmt_s,
    fmt_signed_s,
    median,
    run,
    spread,
)
from benchmarks.infra import Install

TARGET_S = 0.5  # what the gate may add to a restart, per host
PLAIN = """
- name: Plain restart, no gate
  hosts: app
  gather_facts: false
  tasks:
    - name: Restart the backend
      ansible.builtin.command:
        argv: [docker, restart, --time, "10", "{{ leaseguard_runtime.container }}"]
      changed_when: true
"""


@contextlib.contextmanager
def ansible_sandbox(work: Path) -> Iterator[tuple[Path, str]]:
    """(inventory, the guard role's password) of a one-host sandbox with only idle rows."""
    directory = work / "ansible-sandbox"
    sandbox = [str(Install().bin / "python"), "-m", "sandbox"]
    run([*sandbox, "start", "--dir", str(directory)], cwd=REPO, check=True, timeout=180)
    try:
        state = json.loads((directory / "sandbox.json").read_text())
        idle = (
            "insert into execution_runs (id, status, claimed_at) values "
            "(1, 'open', null), (2, 'open', null), (3, 'running', now() - interval '1 hour')"
        )
        run(["psql", state["pg"]["superuser_dsn"], "-qc", idle], check=True, timeout=60)
        yield directory / "inventory.yml", str(state["pg"]["guard"]["password"])
    finally:
        run([*sandbox, "stop", "--dir", str(directory)], cwd=REPO, check=True, timeout=180)


def player(install: Install, work: Path, inventory: Path, password: str) -> Callable[[Path], float]:
    """Runs one playbook with `install`'s ansible and collection; returns its wall time."""
    home = Path(tempfile.mkdtemp(prefix="ansible-", dir=work))
    env = {
        **install.env(),
        "ANSIBLE_CONFIG": str(install.root / "ansible.cfg"),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(home / "cp"),
        "PGPASSWORD": password,
    }

    def play(playbook: Path) -> float:
        start = time.perf_counter()
        argv = ["ansible-playbook", "-i", str(inventory), str(playbook)]
        if (done := run(argv, cwd=install.root, env=env)).returncode:
            raise RuntimeError(f"{playbook.name} failed: {done.stdout[-3000:]}{done.stderr[-999:]}")
        return time.perf_counter() - start

    return play


def run_bench(work: Path, reps: int, log: Callable[[str], None]) -> tuple[Section, list[Finding]]:
    plain_yml = work / "plain.yml"
    plain_yml.write_text(PLAIN)
    books = {"plain": plain_yml, "gated": REPO / "playbooks" / "deploy.yml"}
    runs: dict[str, list[float]] = {name: [] for name in books}
    with ansible_sandbox(work) as (inventory, password):
        play = player(Install(), work, inventory, password)
        for round_ in range(reps + 1):
            for name, book in books.items():
                seconds = play(book)
                if round_:
                    runs[name].append(seconds)
            log(f"  ansible round {round_}/{reps}")
    plain, gated = median(runs["plain"]), median(runs["gated"])
    section = Section(
        "5. Ansible overhead: restart role with the gate vs the same restart without it",
        ["playbook (one host)", "median wall time", "min..max", "vs plain restart"],
        [
            [label, fmt_s(median(runs[k])), spread(runs[k]), fmt_ratio(median(runs[k]) / plain)]
            for k, label in (
                ("plain", "plain `docker restart` task (ansible.builtin.command)"),
                ("gated", "`playbooks/deploy.yml` (look up, judge, restart, verify)"),
            )
        ],
        [f"Medians of {reps} interleaved runs after a warm-up (ssh's ControlPersist master)."],
    )
    finding = Finding(
        "5. Ansible overhead",
        "gated restart - plain restart, per host",
        f"{fmt_signed_s(gated - plain)} ({fmt_ratio(gated / plain)})",
        f"<= +{fmt_s(TARGET_S)}",
        gated - plain <= TARGET_S,
        f"plain {fmt_s(plain)}, gated {fmt_s(gated)}",
    )
    return section, [finding]
