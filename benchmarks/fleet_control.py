"""Item 3's control: what Fabric and psycopg cost per host on their own, without leaseguard.

Run as a whole process, as `fab guard` is (`python -m benchmarks.fleet_control SPEC.json`):
every host at once, a thread each, as leaseguard's fleet runs them, and per host the least a
guard that reaches the database through each host's own tunnel must do:

- open the SSH connection (the same key and known_hosts, unknown host keys refused),
- run the same lookup script in one exec,
- forward a local port to the database through that connection (Fabric's forward_local),
- connect with psycopg through it and run one judgment: the hand-written query of
  benchmarks/shell_guard.sh (running, claimed since the start, lease not expired),
- close it all.

What this costs per extra host is a floor for `fab guard`'s own per-host cost on this
machine: any judgment, however cheap, adds to it. Prints one `ok HOST` line per host and
exits 0 only when every host got through.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import paramiko
import psycopg
from fabric import Connection

from sandbox.netns import free_port

# benchmarks/shell_guard.sh's judgment, the least query a guard runs, its values bound:
# the claimed status, the runtime's start, the lease in seconds.
SHELL_GUARD_QUERY = """
SELECT count(*) FROM execution_runs
WHERE status = %s
  AND (claimed_at IS NULL
       OR (claimed_at >= %s::timestamptz
           AND claimed_at + make_interval(secs => %s) > now()))
"""


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    with ThreadPoolExecutor(max_workers=len(spec["hosts"])) as pool:
        done = list(pool.map(lambda host: _one_host(host, spec), spec["hosts"]))
    for host in done:
        print(f"ok {host}")
    return 0


def _one_host(host: str, spec: dict[str, Any]) -> str:
    keys = {"key_filename": spec["key"], "look_for_keys": False, "allow_agent": False}
    with Connection(host, connect_kwargs=keys) as connection:
        connection.client.load_host_keys(spec["known_hosts"])
        connection.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        connection.run(spec["command"], hide=True)
        port = free_port()
        forwarded = connection.forward_local(
            port, remote_port=spec["db_port"], remote_host=spec["db_host"], local_host="127.0.0.1"
        )
        with forwarded, _connect_when_listening(spec["dsn"], port) as conn:
            judged = ("running", spec["started"], spec["lease_s"])
            [[live]] = conn.execute(SHELL_GUARD_QUERY, judged).fetchall()
    if live == 0:  # every host of the fronts finds the live claims; so must the control's
        raise RuntimeError(f"{host}: the judgment found no live claim")
    return host


def _connect_when_listening(dsn: str, port: int) -> psycopg.Connection[Any]:
    """forward_local's listener is bound by a thread it starts: until then, a refusal."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return psycopg.connect(dsn, host="127.0.0.1", port=port)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
