"""5. Ansible overhead: the restart role with its gate vs the same restart without it.

One sandbox host (sandbox/detached.py: sshd in a namespace, PostgreSQL, a podman
backend) holding only rows nobody runs, so the gated deploy proceeds and restarts. Side by
side, interleaved, in one run:

* plain: a one-task play, `docker restart --time 10 <backend>` on the host;
* gated: `playbooks/deploy.yml` (restart role: look up, judge through the SSH tunnel,
  restart, verify the start time moved forward);
* gate only: the guard role alone (look up and judge), what the gate adds to a restart.

Each is a whole `ansible-playbook` process, as an operator runs it; medians over `reps`
runs after one warm-up of each (which opens ssh's ControlPersist master).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import (
    REPO,
    Finding,
    Section,
    fmt_ratio,
    fmt_s,
    fmt_signed_s,
    median,
    spread,
    timed,
)

PYTHON = str(REPO / ".venv" / "bin" / "python")
# Issue 16: what the gate may add to a restart, per host.
GATE_OVERHEAD_TARGET_S = 0.5

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

# The cheapest restart task there is: no Python on the host, as runtime_restart runs it.
PLAIN_RAW = """
- name: Plain restart through the host's shell, no gate
  hosts: app
  gather_facts: false
  tasks:
    - name: Restart the backend
      ansible.builtin.raw: docker restart --time 10 {{ leaseguard_runtime.container | quote }}
      changed_when: true
"""

GATE_ONLY = """
- name: The gate alone
  hosts: app
  gather_facts: false
  roles:
    - role: leaseguard.deploy.guard
"""


def run_bench(work: Path, reps: int, log: Callable[[str], None]) -> tuple[Section, list[Finding]]:
    sandbox = work / "ansible-sandbox"
    _sandbox("start", sandbox)
    try:
        state = json.loads((sandbox / "sandbox.json").read_text())
        _only_idle_rows(state["pg"]["superuser_dsn"])
        env = _ansible_env(work, state)
        playbooks = _playbooks(work)
        runs: dict[str, list[float]] = {name: [] for name in playbooks}
        for round_ in range(reps + 1):
            for name, playbook in playbooks.items():
                seconds = timed(lambda p=playbook: _play(p, sandbox / "inventory.yml", env))
                if round_:  # round 0 warms up ssh's ControlPersist master
                    runs[name].append(seconds)
            log(f"5. ansible round {round_}/{reps}")
    finally:
        _sandbox("stop", sandbox)
    return _report(runs)


def _playbooks(work: Path) -> dict[str, Path]:
    plain, raw, gate = work / "plain.yml", work / "plain_raw.yml", work / "gate_only.yml"
    plain.write_text(PLAIN)
    raw.write_text(PLAIN_RAW)
    gate.write_text(GATE_ONLY)
    return {
        "plain": plain,
        "plain raw": raw,
        "gated": REPO / "playbooks" / "deploy.yml",
        "gate only": gate,
    }


def _play(playbook: Path, inventory: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{playbook.name} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")


def _report(runs: dict[str, list[float]]) -> tuple[Section, list[Finding]]:
    plain, raw, gated, gate = (
        median(runs[k]) for k in ("plain", "plain raw", "gated", "gate only")
    )
    section = Section(
        "5. Ansible overhead: restart role with the gate vs the same restart without it",
        ["playbook (one host)", "median wall time", "min..max", "vs plain restart"],
    )
    for name, label in (
        ("plain", "plain `docker restart` task (ansible.builtin.command)"),
        ("plain raw", "plain `docker restart` through the host's shell (ansible.builtin.raw)"),
        ("gated", "`playbooks/deploy.yml` (restart role: look up, judge, restart, verify)"),
        ("gate only", "guard role alone (look up, judge through the tunnel)"),
    ):
        values = runs[name]
        section.rows.append(
            [label, fmt_s(median(values)), spread(values), fmt_ratio(median(values) / plain)]
        )
    section.notes.append(
        f"The gate adds {fmt_signed_s(gated - plain)} per host to a plain restart task, "
        f"{fmt_signed_s(gated - raw)} to the cheapest one (raw: no Python on the host, as "
        f"the restart role's runtime_restart runs it; part of what the gate saves against "
        f"ansible.builtin.command is its own restart's cost); the guard role alone takes "
        f"{fmt_s(gate)}. Whole ansible-playbook processes, medians of "
        f"{len(runs['plain'])} interleaved runs after a warm-up."
    )
    finding = Finding(
        "5. Ansible overhead",
        "gated restart - plain restart, per host",
        f"{fmt_signed_s(gated - plain)} ({fmt_ratio(gated / plain)})",
        f"<= +{fmt_s(GATE_OVERHEAD_TARGET_S)}",
        gated - plain <= GATE_OVERHEAD_TARGET_S,
        f"plain {fmt_s(plain)}, gated {fmt_s(gated)}; vs a raw restart task "
        f"{fmt_signed_s(gated - raw)}; the guard role alone {fmt_s(gate)}",
    )
    return section, [finding]


def _sandbox(action: str, directory: Path) -> None:
    subprocess.run(
        [PYTHON, "-m", "sandbox", action, "--dir", str(directory)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _only_idle_rows(superuser_dsn: str) -> None:
    """Queued rows and an orphan: the deploy proceeds every time."""
    sql = (
        "insert into execution_runs (id, status, claimed_at) values "
        "(1, 'open', null), (2, 'open', null), (3, 'running', now() - interval '1 hour')"
    )
    subprocess.run(["psql", superuser_dsn, "-qc", sql], check=True, timeout=60)


def _ansible_env(work: Path, state: dict[str, object]) -> dict[str, str]:
    home = Path(tempfile.mkdtemp(prefix="ansible-", dir=work))
    guard = state["pg"]["guard"]  # type: ignore[index]
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PG", "LEASEGUARD"))},
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(home / "cp"),
        "PGPASSWORD": str(guard["password"]),  # type: ignore[index]
    }
