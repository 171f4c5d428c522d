"""A detachable sandbox of real hosts that outlives one Python process.

Molecule's delegated driver and ``make demo`` run several ``ansible-playbook`` processes against
the same hosts: a create playbook starts them, later runs use them, a destroy playbook tears
them down. The pytest fixtures cannot do that (they live and die with one session), so this
module runs the same building blocks (:func:`open_app_host`, :class:`PodmanEngine`,
:class:`PgCluster`) in a long-lived ``serve`` process and leaves files behind that describe
them::

    python -m sandbox start --dir D [--hosts app1[,app2...]] [--database NAME]
                                          [--pg-base-dir P]
    python -m sandbox stop  --dir D
    python -m sandbox serve --dir D [...]     # foreground; what start detaches

Run with the venv's python from the repository root (or with the root on PYTHONPATH); ``start``
runs ``serve`` in the repository root whatever the caller's directory. ``start`` prints the
inventory path once the hosts are ready and exits 0 (else 1, with the log's tail); ``stop``
exits 0 once everything is torn down, or when nothing was running, and 1 if it had to SIGKILL
the sandbox (then leftovers are possible).

What ``serve`` builds, in one ExitStack, torn down in reverse on SIGTERM/SIGINT:

* one private podman engine under ``D/podman`` (no bridge networking, no iptables);
* per alias an app host (network namespace + sshd on ``<addr>:22``, files under
  ``D/hosts/<alias>``) whose SSH sessions talk to that engine as their Docker daemon;
* on the FIRST host a PostgreSQL 15 with pg_cron on the namespace's ``127.0.0.1:5432``, with
  database NAME (default ``app``) holding an empty ``execution_runs`` table that the guard
  roles (members of ``pg_read_all_data``) can read; its files go in a fresh directory under
  P (default ``/tmp``; every parent of P must be traversable by the ``postgres`` OS user);
* per host a container ``backend`` (one host) or ``backend-<alias>`` (several) with
  ``APP_TASK_TIMEOUT_S=3600``.

``start`` is idempotent-ish: if D already has a live, ready sandbox it only prints the inventory
path (the options are not compared); a stale D (dead pid) is cleared and started afresh.

The database on the other hosts (a choice): PgCluster listens only on its namespace's
loopback, and the namespaces have no route to each other (only a /24 link to the root
namespace, whose ip_forward we must not touch). So every extra host gets a TCP forwarder on
ITS OWN ``127.0.0.1:5432`` that connects to the first host's ``127.0.0.1:5432``: a thread of
the serve process that binds its listening socket inside the extra host's namespace and opens
its upstream sockets inside the first host's namespace (``setns(2)`` is per thread). Postgres
then sees a loopback TCP client, so ``guard_pw`` must still present its password (scram), as
on the first host. Every host therefore has the same ``leaseguard_db_host:
127.0.0.1``: "the database at the host's loopback", like a host-local pgbouncer or cloud SQL
proxy, and one shared database, as real app hosts share one.

Files in D (all written atomically; ``ready`` last):

* ``inventory.yml``: group ``app``; per host the SSH variables of
  :meth:`AppHost.ansible_host_vars` plus ``leaseguard_task_timeout`` / ``leaseguard_runtime``
  naming its container; group vars ``leaseguard_db_*`` (no password: the collection's
  ``db_password`` falls back to ``PGPASSWORD``).
* ``env.sh``: ``export PGPASSWORD=...`` and the variables that point a ``docker`` CLI at the
  engine; source it before running playbooks.
* ``sandbox.json``: machine-readable state (pid, hosts, docker env, PostgreSQL, paths).
* ``serve.pid`` (from the very start, so ``stop`` works during startup), ``sandbox.log``
  (stderr of ``serve``, timestamped), ``ready``.

At teardown ``ready`` goes first; ``sandbox.json``, ``inventory.yml``, ``env.sh`` and
``serve.pid`` go last, so D never describes hosts that no longer exist. The log stays.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from psycopg import sql

from sandbox.hosts import APP_PG_PORT, AppHost, open_app_host
from sandbox.netns import (
    kill_pids,
    kill_process_tree,
    pid_alive,
    pids_with_cmdline_containing,
    reap_stale_namespaces,
)
from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE, PG_BASE_DIR, PgCluster
from sandbox.podman import PodmanEngine
from sandbox.runs_table import create_runs_table

REPO_ROOT = Path(__file__).resolve().parents[1]
MODULE = "sandbox"
TASK_TIMEOUT_VAR = "APP_TASK_TIMEOUT_S"
TASK_TIMEOUT_S = "3600"
START_DEADLINE_S = 120.0
STOP_DEADLINE_S = 60.0
POLL_S = 0.05
_ALIAS_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_CLONE_NEWNET = 0x40000000

log = logging.getLogger("sandbox")


# -- paths and small file helpers ------------------------------------------------------------


@dataclass(frozen=True)
class SandboxDir:
    """The files a sandbox directory holds; ``root`` is absolute so logs and JSON are too."""

    root: Path

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> SandboxDir:
        return cls(Path(path).resolve())

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yml"

    @property
    def state(self) -> Path:
        return self.root / "sandbox.json"

    @property
    def env_sh(self) -> Path:
        return self.root / "env.sh"

    @property
    def ready(self) -> Path:
        return self.root / "ready"

    @property
    def pid_file(self) -> Path:
        return self.root / "serve.pid"

    @property
    def log(self) -> Path:
        return self.root / "sandbox.log"

    def state_files(self) -> list[Path]:
        """What describes a running sandbox (removed when it stops; the log stays)."""
        return [self.ready, self.state, self.inventory, self.env_sh, self.pid_file]


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write to a temp file beside ``path`` and rename it, so readers never see half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def serve_pid(sandbox: SandboxDir) -> int | None:
    """PID of a live ``serve`` for this directory, else None (guards against PID reuse)."""
    try:
        pid = int(sandbox.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    ours = MODULE.encode() in argv and b"serve" in argv and str(sandbox.root).encode() in argv
    return pid if ours and pid_alive(pid) else None


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- a TCP forwarder between two network namespaces -------------------------------------------


def _enter_netns(name: str) -> None:
    """Move the CALLING THREAD into namespace ``name`` (other threads keep theirs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class NetnsForwarder:
    """``127.0.0.1:port`` in namespace ``listen_ns`` forwarded to ``127.0.0.1:port`` in
    ``target_ns``.

    Why not socat or ``ip netns exec``: a process lives in one namespace, but this needs a
    listener in one and upstream connections in another. A thread can ``setns`` on its own, and
    a socket stays in the namespace it was created in, so one thread binds in ``listen_ns``,
    then moves to ``target_ns`` for good and opens every upstream connection there.
    """

    def __init__(self, listen_ns: str, target_ns: str, port: int) -> None:
        self.listen_ns = listen_ns
        self.target_ns = target_ns
        self.port = port
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"fwd-{listen_ns}", daemon=True)

    def __enter__(self) -> NetnsForwarder:
        try:
            self._thread.start()
            self._ready.wait(10)
            if self._error is not None or self._listener is None:
                raise RuntimeError(f"forwarder in {self.listen_ns} did not start: {self._error!r}")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            _enter_netns(self.listen_ns)
            self._listener = socket.create_server(("127.0.0.1", self.port))
            _enter_netns(self.target_ns)
        except BaseException as exc:
            self._error = exc
            return
        finally:
            self._ready.set()
        self._accept_loop(self._listener)

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stop() shut the listener down
            try:
                # Created in this thread, so in target_ns: Postgres sees a loopback client.
                upstream = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError as exc:
                log.warning("forwarder %s: upstream refused: %s", self.listen_ns, exc)
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            done = threading.Semaphore(0)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, done), daemon=True).start()
            threading.Thread(target=self._reap, args=(client, upstream, done), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, done: threading.Semaphore) -> None:
        """Copy one direction until EOF and pass the EOF on (libpq ends with a Terminate)."""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            # One side reset: wake the other direction's recv() too.
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        finally:
            done.release()

    def _reap(self, a: socket.socket, b: socket.socket, done: threading.Semaphore) -> None:
        """Close both sockets once both directions have finished."""
        done.acquire()
        done.acquire()
        with self._lock:
            self._sockets.difference_update((a, b))
        a.close()
        b.close()

    def stop(self) -> None:
        """Stop listening and cut every open connection (so the namespaces can go)."""
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        self._thread.join(5)
        with self._lock:
            socks, self._sockets = list(self._sockets), set()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


# -- serve: build everything in one ExitStack ---------------------------------------------------


class Shutdown(BaseException):
    """Raised by the SIGTERM/SIGINT handler so the ExitStack unwinds, also mid-startup."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # One signal is enough: ignore the rest so they cannot interrupt the teardown.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Shutdown(signal.Signals(signum).name)


@dataclass
class Sandbox:
    """What ``serve`` started; turned into the files in D by :func:`write_outputs`."""

    dir: SandboxDir
    database: str
    engine: PodmanEngine
    hosts: list[AppHost] = field(default_factory=list)
    containers: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def pg_host(self) -> AppHost:
        return self.hosts[0]

    @property
    def cluster(self) -> PgCluster:
        cluster = self.pg_host.pg
        if cluster is None:
            raise RuntimeError("the first host has no PostgreSQL")
        return cluster


def _enter_logged(
    stack: ExitStack, label: str, cm: AbstractContextManager[Any], timings: dict[str, float]
) -> Any:
    """Enter ``cm`` on ``stack``, logging how long it took to start and, later, to stop."""
    marks: dict[str, float] = {}

    def stopped() -> None:
        if "t0" in marks:
            log.info("stopped %s in %.2fs", label, time.monotonic() - marks["t0"])

    def stopping() -> None:
        log.info("stopping %s", label)
        marks["t0"] = time.monotonic()

    t0 = time.monotonic()
    log.info("starting %s", label)
    stack.callback(stopped)
    value = stack.enter_context(cm)
    stack.callback(stopping)
    timings[label] = round(time.monotonic() - t0, 3)
    log.info("started %s in %.2fs", label, timings[label])
    return value


def container_names(aliases: Sequence[str]) -> dict[str, str]:
    """``backend`` for a single host (the documented default), ``backend-<alias>`` otherwise."""
    if len(aliases) == 1:
        return {aliases[0]: "backend"}
    return {alias: f"backend-{alias}" for alias in aliases}


def create_app_database(cluster: PgCluster, name: str) -> None:
    """Database ``name`` with an empty ``execution_runs``, owned by the superuser.

    The guard roles need nothing more: ``pg_read_all_data`` lets them read it, PUBLIC may
    connect, and neither may write.
    """
    with cluster.connect(socket=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with cluster.connect(name, socket=True) as conn:
        create_runs_table(conn)


def build(
    stack: ExitStack, sandbox: Sandbox, aliases: Sequence[str], pg_base_dir: Path = PG_BASE_DIR
) -> None:
    """Start engine, hosts, database, forwarders and containers, each undone by ``stack``."""
    root, timings = sandbox.dir.root, sandbox.timings
    for i, alias in enumerate(aliases):
        cm = open_app_host(
            root / "hosts" / alias,
            alias,
            engine=sandbox.engine,
            pg=i == 0,
            pg_base_dir=pg_base_dir,
        )
        label = f"host {alias}" + (" (sshd, postgres)" if i == 0 else " (sshd)")
        sandbox.hosts.append(_enter_logged(stack, label, cm, timings))
    t0 = time.monotonic()
    create_app_database(sandbox.cluster, sandbox.database)
    timings["database"] = round(time.monotonic() - t0, 3)
    log.info("created database %s in %.2fs", sandbox.database, timings["database"])
    for host in sandbox.hosts[1:]:
        fwd = NetnsForwarder(host.netns.name, sandbox.pg_host.netns.name, APP_PG_PORT)
        _enter_logged(stack, f"db forwarder {host.alias}:{APP_PG_PORT}", fwd, timings)
        host.netns.wait_listening(APP_PG_PORT)
    for alias, name in container_names(aliases).items():
        _enter_logged(stack, f"container {name}", running_backend(sandbox.engine, name), timings)
        sandbox.containers[alias] = name


@contextlib.contextmanager
def running_backend(engine: PodmanEngine, name: str) -> Iterator[str]:
    """The host's ``backend`` container, removed on exit (engine.stop would only sweep it)."""
    engine.run_backend(name, env={TASK_TIMEOUT_VAR: TASK_TIMEOUT_S})
    try:
        yield name
    finally:
        engine.remove(name)


def serve(
    sandbox_dir: SandboxDir, aliases: Sequence[str], database: str, pg_base_dir: Path = PG_BASE_DIR
) -> int:
    """Start everything, publish the files, block until a signal, tear everything down."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    sandbox_dir.root.mkdir(parents=True, exist_ok=True)
    write_atomically(sandbox_dir.pid_file, f"{os.getpid()}\n")
    # Several checkouts may run sandboxes on one machine: say whose this is.
    log.info("serving %s from %s", sandbox_dir.root, REPO_ROOT)
    t_start = time.monotonic()
    try:
        with ExitStack() as stack:
            stack.callback(_remove_state_files, sandbox_dir)
            timings: dict[str, float] = {}
            engine_cm = PodmanEngine(sandbox_dir.root / "podman")
            engine = _enter_logged(stack, "podman engine", engine_cm, timings)
            sandbox = Sandbox(sandbox_dir, database, engine, timings=timings)
            build(stack, sandbox, aliases, pg_base_dir)
            timings["total"] = round(time.monotonic() - t_start, 3)
            write_outputs(sandbox)
            stack.callback(_begin_teardown, sandbox_dir)
            log.info("ready in %.2fs: %s", timings["total"], sandbox_dir.inventory)
            while True:
                signal.pause()
    except Shutdown as why:
        log.info("stopped on %s", why)
    except Exception:
        log.exception("sandbox failed")
        return 1
    finally:
        log.info("serve exits (%.2fs after start)", time.monotonic() - t_start)
    return 0


def _begin_teardown(sandbox_dir: SandboxDir) -> None:
    log.info("teardown: removing %s", sandbox_dir.ready)
    sandbox_dir.ready.unlink(missing_ok=True)


def _remove_state_files(sandbox_dir: SandboxDir) -> None:
    for path in sandbox_dir.state_files():
        path.unlink(missing_ok=True)
    log.info("teardown complete; removed the state files")


# -- the files that describe a running sandbox ------------------------------------------------


def connection_vars(database: str) -> dict[str, Any]:
    """The roles' ``leaseguard_db_*`` vars: the database is at each host's loopback."""
    return {
        "leaseguard_db_host": "127.0.0.1",
        "leaseguard_db_port": APP_PG_PORT,
        "leaseguard_db_name": database,
        "leaseguard_db_user": GUARD_PW_ROLE,
    }


def inventory(sandbox: Sandbox) -> dict[str, Any]:
    """An Ansible YAML inventory: group ``app`` with every host, its container and SSH vars."""
    hosts: dict[str, Any] = {}
    for host in sandbox.hosts:
        name = sandbox.containers[host.alias]
        hosts[host.alias] = {
            **host.ansible_host_vars(),
            "leaseguard_task_timeout": {
                "source": "docker",
                "container": name,
                "variable": TASK_TIMEOUT_VAR,
            },
            "leaseguard_runtime": {"source": "docker", "container": name},
        }
    group = {"hosts": hosts, "vars": connection_vars(sandbox.database)}
    return {"all": {"children": {"app": group}}}


def state(sandbox: Sandbox) -> dict[str, Any]:
    """``sandbox.json``: everything a script needs to reach the hosts, engine and database."""
    cluster, root = sandbox.cluster, sandbox.dir
    return {
        "pid": os.getpid(),
        "dir": str(root.root),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "inventory": str(root.inventory),
        "env_sh": str(root.env_sh),
        "log": str(root.log),
        "hosts": [_host_state(sandbox, host) for host in sandbox.hosts],
        # Only the variables to add to the caller's environment, not a copy of ours.
        "docker_env": sandbox.engine.session_env,
        "pg": {
            "host_alias": sandbox.pg_host.alias,
            "root": str(cluster.root),
            "socket_dir": str(cluster.socket_dir),
            "port": cluster.port,
            "database": sandbox.database,
            "superuser_dsn": cluster.socket_dsn(sandbox.database),
            "guard": {
                "host": "127.0.0.1",
                "port": APP_PG_PORT,
                "dbname": sandbox.database,
                "user": GUARD_PW_ROLE,
                "password": GUARD_PW_PASSWORD,
            },
        },
        "timings_s": sandbox.timings,
    }


def _host_state(sandbox: Sandbox, host: AppHost) -> dict[str, Any]:
    return {
        "alias": host.alias,
        "addr": host.addr,
        "port": host.port,
        "user": "root",
        "client_key_path": str(host.client_key_path),
        "known_hosts_path": str(host.known_hosts_path),
        "ssh_config_path": str(host.ssh_config_path),
        "container": sandbox.containers[host.alias],
        "netns": host.netns.name,
        "has_postgres": host.pg is not None,
    }


def env_sh(sandbox: Sandbox) -> str:
    lines = ["# Source me: the controller's view of this sandbox (docker CLI, guard password)."]
    env = {**sandbox.engine.session_env, "PGPASSWORD": GUARD_PW_PASSWORD}
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    return "\n".join(lines) + "\n"


def write_outputs(sandbox: Sandbox) -> None:
    """Inventory, env.sh and sandbox.json first, ``ready`` last: ready means all are there."""
    root = sandbox.dir
    write_atomically(root.inventory, yaml.safe_dump(inventory(sandbox), sort_keys=False))
    write_atomically(root.env_sh, env_sh(sandbox), mode=0o600)
    write_atomically(root.state, json.dumps(state(sandbox), indent=2) + "\n", mode=0o600)
    write_atomically(root.ready, "")


# -- start / stop -----------------------------------------------------------------------------


def start(
    sandbox_dir: SandboxDir, aliases: Sequence[str], database: str, pg_base_dir: Path = PG_BASE_DIR
) -> int:
    """Detach ``serve`` and wait for ``ready``; on failure show the log and leave nothing."""
    pid = serve_pid(sandbox_dir)
    if pid is not None:
        if not sandbox_dir.ready.exists():
            print(f"sandbox {sandbox_dir.root} is starting (pid {pid}); waiting", file=sys.stderr)
            return _wait_ready(sandbox_dir, None, pid)
        print(sandbox_dir.inventory)
        return 0
    for path in sandbox_dir.state_files():
        path.unlink(missing_ok=True)
    sandbox_dir.root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", MODULE, "serve", "--dir", str(sandbox_dir.root)]
    argv += ["--hosts", ",".join(aliases), "--database", database]
    argv += ["--pg-base-dir", str(pg_base_dir)]
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    with sandbox_dir.log.open("ab") as logfile:
        child = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=logfile,
            start_new_session=True,
        )
    try:
        return _wait_ready(sandbox_dir, child, child.pid)
    except KeyboardInterrupt:
        # Whoever ran `start` gave up: do not leave a detached sandbox nobody knows about.
        _terminate(sandbox_dir, child.pid)
        return 130


def _wait_ready(sandbox_dir: SandboxDir, child: subprocess.Popen[bytes] | None, pid: int) -> int:
    deadline = time.monotonic() + START_DEADLINE_S
    while not sandbox_dir.ready.exists():
        exited = child.poll() is not None if child is not None else not pid_alive(pid)
        if exited or time.monotonic() > deadline:
            why = "exited" if exited else f"not ready after {START_DEADLINE_S:.0f}s"
            print(f"sandbox {why}; log tail:\n{log_tail(sandbox_dir.log)}", file=sys.stderr)
            if not exited:
                _terminate(sandbox_dir, pid)
            return 1
        time.sleep(POLL_S)
    print(sandbox_dir.inventory)
    return 0


def _terminate(sandbox_dir: SandboxDir, pid: int) -> bool:
    """SIGTERM ``serve`` and wait for its teardown; SIGKILL as a last resort. True if clean."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_DEADLINE_S
    while pid_alive(pid):
        if time.monotonic() > deadline:
            _kill_hard(sandbox_dir, pid)
            return False
        time.sleep(POLL_S)
    return True


def _kill_hard(sandbox_dir: SandboxDir, pid: int) -> None:
    """SIGKILL: no teardown runs, so sweep what we can find (namespaces, engine, postgres)."""
    print(
        f"sandbox pid {pid} did not stop in {STOP_DEADLINE_S:.0f}s: sending SIGKILL and "
        "sweeping its processes and namespaces; check for leftovers",
        file=sys.stderr,
    )
    pg_root = _recorded_pg_root(sandbox_dir)
    kill_process_tree(pid, timeout=5)
    reap_stale_namespaces()
    kill_pids(pids_with_cmdline_containing(str(sandbox_dir.root) + "/"), timeout=5)
    if pg_root is not None:
        kill_pids(pids_with_cmdline_containing(pg_root + "/"), timeout=5)
    for path in sandbox_dir.state_files():
        path.unlink(missing_ok=True)


def _recorded_pg_root(sandbox_dir: SandboxDir) -> str | None:
    try:
        return str(json.loads(sandbox_dir.state.read_text())["pg"]["root"])
    except (OSError, ValueError, KeyError):
        return None


def stop(sandbox_dir: SandboxDir) -> int:
    """Stop the sandbox in D; 0 if it stopped cleanly or nothing ran, 1 after a SIGKILL."""
    pid = serve_pid(sandbox_dir)
    if pid is None:
        for path in sandbox_dir.state_files():
            path.unlink(missing_ok=True)
        print(f"no sandbox running in {sandbox_dir.root}", file=sys.stderr)
        return 0
    t0 = time.monotonic()
    clean = _terminate(sandbox_dir, pid)
    print(f"sandbox {sandbox_dir.root} stopped in {time.monotonic() - t0:.2f}s", file=sys.stderr)
    return 0 if clean else 1


# -- command line -----------------------------------------------------------------------------


def _aliases(value: str) -> list[str]:
    aliases = [a.strip() for a in value.split(",") if a.strip()]
    bad = [a for a in aliases if not _ALIAS_RE.match(a)]
    if not aliases or bad or len(set(aliases)) != len(aliases):
        raise argparse.ArgumentTypeError(f"need distinct host names like app1,app2: {value!r}")
    return aliases


def _database(value: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", value):
        raise argparse.ArgumentTypeError(f"not a plain database name: {value!r}")
    return value


def _pg_base_dir(value: str) -> Path:
    path = Path(value).resolve()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not an existing directory: {value!r}")
    return path


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "start"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--dir", required=True, type=SandboxDir.of)
        cmd.add_argument("--hosts", type=_aliases, default=["app1"])
        cmd.add_argument("--database", type=_database, default="app")
        cmd.add_argument("--pg-base-dir", type=_pg_base_dir, default=PG_BASE_DIR)
    sub.add_parser("stop").add_argument("--dir", required=True, type=SandboxDir.of)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(
            level=logging.INFO,
            stream=sys.stderr,
            format="%(asctime)s.%(msecs)03d sandbox[%(process)d] %(message)s",
            datefmt="%Y-%m-%dT%H:%M:%S",
        )
        return serve(args.dir, args.hosts, args.database, args.pg_base_dir)
    if args.command == "start":
        return start(args.dir, args.hosts, args.database, args.pg_base_dir)
    return stop(args.dir)


if __name__ == "__main__":
    sys.exit(main())
