"""A fleet of plain hosts sharing one database, as the app servers of a real fleet do.

Hosts `app1..appN` are network namespaces with an sshd each and nothing else (2 cores hold 50
of them). One PostgreSQL in the root namespace listens on the first host's veth peer address;
a /32 route inside every other namespace (and nothing outside our own namespaces) makes that
address reachable from all of them. Used by the tests and the benchmarks.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sandbox.hosts import AppHost, open_app_host
from sandbox.netns import IP
from sandbox.pgcluster import PG_BASE_DIR, PgCluster

# This machine's /root/.bashrc runs `pyenv init` (~160 ms), and bash sources ~/.bashrc for
# every command sshd runs - unless SHLVL is already set, which sshd's SetEnv can do. App
# servers do not run pyenv in root's rc file: the fleet's hosts skip it.
SKIP_BASHRC = {"SHLVL": "1"}


def session_env(engine: Any) -> Any:
    """What open_app_host reads of an engine: the variables every SSH session gets (engine
    None: a host without one)."""
    return SimpleNamespace(session_env={**(engine.session_env if engine else {}), **SKIP_BASHRC})


@dataclass
class Fleet:
    """Plain hosts sharing one database at `db_addr:db.port`, one client key, one known_hosts."""

    hosts: list[AppHost]
    db: PgCluster
    db_addr: str
    key_path: Path
    known_hosts: Path

    def targets(self, n: int | None = None) -> list[str]:
        return [f"root@{h.addr}" for h in self.hosts[:n]]


@contextlib.contextmanager
def fleet(base: Path, engine: Any, size: int) -> Iterator[Fleet]:
    """`size` hosts and the root-namespace database they all reach; torn down on exit.

    engine None: lightweight hosts (a namespace and sshd, no container engine), for lookups
    that read the host itself (env_file, process) or none.
    """
    with contextlib.ExitStack() as stack:
        hosts: list[AppHost] = []
        for i in range(1, size + 1):
            host_dir = base / f"app{i}"
            host_dir.mkdir(parents=True, exist_ok=True)
            opened = open_app_host(host_dir, f"app{i}", engine=session_env(engine))
            hosts.append(stack.enter_context(opened))
        first = hosts[0]
        db_addr = first.netns.addr_host
        for host in hosts[1:]:
            # Only inside our own namespaces: the root namespace owns db_addr already.
            gateway = host.netns.addr_host
            subprocess.run(
                [IP, "-n", host.netns.name, "route", "add", f"{db_addr}/32", "via", gateway],
                check=True,
                capture_output=True,
            )
            # One client key for the whole fleet, as an operator's key would be.
            with host.sshd.authorized_keys_path.open("a") as fh:
                fh.write(first.sshd.client_public_key + "\n")
        known_hosts = base / "known_hosts"
        known_hosts.write_text("".join(h.known_hosts_path.read_text() for h in hosts))
        db = stack.enter_context(PgCluster(PG_BASE_DIR, listen=f"127.0.0.1,{db_addr}"))
        # The guard's connections arrive from the hosts' own addresses, through their sshd.
        with (db.data_dir / "pg_hba.conf").open("a") as fh:
            fh.writelines(f"host all postgres {h.addr}/32 trust\n" for h in hosts)
        with db.connect(socket=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield Fleet(hosts, db, db_addr, first.client_key_path, known_hosts)
