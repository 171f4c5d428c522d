"""Throw-away "hosts" for the sandbox and the tests: a network namespace joined by a veth.

Each :class:`NetnsHost` owns one namespace and one veth pair on a private /24 inside
``10.213.0.0/16``. Only addresses created here are ever used, so tests never touch the
machine's real network. Several test sessions (other engineers, CI shards) may run on the
same machine at once: names carry a random token and subnets are allocated under a file lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

IP = "/usr/sbin/ip"
TEST_SUPERNET = ipaddress.ip_network("10.213.0.0/16")
_LOCK_PATH = Path("/tmp/leaseguard-netns.lock")
NAME_PREFIX = "lgt-"


class NetnsError(RuntimeError):
    """A namespace command failed (the message carries the command and its stderr)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([IP, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@contextlib.contextmanager
def _allocation_lock() -> Iterator[None]:
    """Serialise subnet allocation between concurrent test sessions on this machine."""
    with _LOCK_PATH.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    out = _ip("-o", "-4", "addr", "show").stdout
    used: set[ipaddress.IPv4Network] = set()
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            iface = ipaddress.ip_interface(fields[fields.index("inet") + 1])
            used.add(ipaddress.IPv4Network(iface.network))
    return used


class NetnsHost:
    """A network namespace reachable from the root namespace at ``addr_ns``.

    Nothing happens in the constructor: call :meth:`start` (or use ``with``), then
    :meth:`close`, which is idempotent and safe after a partial start.

    :param name: ``ip netns`` name; veth names are derived from it. Names starting with
        ``lgt-<pid>-`` are reaped by :func:`reap_stale_namespaces` once ``<pid>`` is gone.
    :param addr_host: address of the root-namespace end of the veth, e.g. ``10.213.7.1``.
    :param addr_ns: address of the namespace end, e.g. ``10.213.7.2``.
    :param prefixlen: prefix length of the veth link (24 by default).
    :param hostname: if set, :meth:`command_prefix` also gives started processes this
        hostname through a private UTS namespace (``unshare --uts``).
    """

    def __init__(
        self,
        name: str,
        addr_host: str,
        addr_ns: str,
        *,
        prefixlen: int = 24,
        hostname: str | None = None,
    ) -> None:
        self.name = name
        self.addr_host = addr_host
        self.addr_ns = addr_ns
        self.prefixlen = prefixlen
        self.hostname = hostname
        # Interface names are limited to 15 bytes: derive short, per-namespace unique ones.
        token = hashlib.sha256(name.encode()).hexdigest()[:10]
        self.veth_host = f"lgh{token}"
        self.veth_ns = f"lgn{token}"
        self._created_netns = False
        self._created_veth = False

    @classmethod
    def allocate(cls, *, hostname: str | None = None, prefix: str = NAME_PREFIX) -> NetnsHost:
        """Start a host with a random name on a free /24 of ``10.213.0.0/16``.

        The lock is held until the addresses exist, so two sessions never pick the same subnet.
        """
        with _allocation_lock():
            reap_stale_namespaces(prefix)
            used = _subnets_in_use()
            for net in TEST_SUPERNET.subnets(new_prefix=24):
                if net in used:
                    continue
                hosts = net.hosts()
                addr_host, addr_ns = str(next(hosts)), str(next(hosts))
                host = cls(
                    # The owner's PID in the name lets a later session reap what a killed
                    # one left behind (see reap_stale_namespaces).
                    f"{prefix}{os.getpid()}-{secrets.token_hex(3)}",
                    addr_host,
                    addr_ns,
                    prefixlen=24,
                    hostname=hostname,
                )
                host.start()
                return host
        raise NetnsError(f"no free /24 left in {TEST_SUPERNET}")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> NetnsHost:
        """Create the namespace, the veth pair and bring ``lo`` and the link up."""
        try:
            _ip("netns", "add", self.name)
            self._created_netns = True
            _ip("link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
            self._created_veth = True
            _ip("link", "set", self.veth_ns, "netns", self.name)
            _ip("addr", "add", f"{self.addr_host}/{self.prefixlen}", "dev", self.veth_host)
            _ip("link", "set", self.veth_host, "up")
            self._ns_ip("addr", "add", f"{self.addr_ns}/{self.prefixlen}", "dev", self.veth_ns)
            self._ns_ip("link", "set", self.veth_ns, "up")
            self._ns_ip("link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill processes left in the namespace, delete the veth and the namespace."""
        if self._created_netns:
            self._kill_namespace_processes()
        if self._created_veth:
            # Deleting one end deletes both; doing it explicitly avoids the asynchronous
            # clean-up that follows `ip netns del` while the namespace is still referenced.
            _ip("link", "del", self.veth_host, check=False)
            self._created_veth = False
        if self._created_netns:
            _ip("netns", "del", self.name, check=False)
            self._created_netns = False

    def __enter__(self) -> NetnsHost:
        return self.start() if not self._created_netns else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ns_ip(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _ip("-n", self.name, *args)

    def _kill_namespace_processes(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL, every process still in this namespace (all of them are ours)."""
        pids = self.pids()
        if pids:
            kill_pids(pids, timeout=timeout)

    def pids(self) -> list[int]:
        """PIDs of the processes whose network namespace is this one."""
        proc = _ip("netns", "pids", self.name, check=False)
        return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []

    # -- running things inside -------------------------------------------------------------

    @property
    def prefix(self) -> list[str]:
        """Argv prefix that runs a command inside the namespace."""
        return [IP, "netns", "exec", self.name]

    def command_prefix(self, hostname: str | None = None) -> list[str]:
        """Argv prefix for a long-lived process: the namespace plus, optionally, a hostname.

        ``hostname`` defaults to the one given at construction; with none, this is
        :attr:`prefix`.
        """
        hostname = hostname or self.hostname
        if not hostname:
            return self.prefix
        # `ip netns exec` and `unshare` both exec, so the started PID is the final program's.
        return [
            *self.prefix,
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            hostname,
        ]

    def run(
        self,
        cmd: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = 30,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` inside the namespace and capture its output as text."""
        return subprocess.run(
            [*self.prefix, *cmd],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            env=None if env is None else dict(env),
            **kwargs,
        )

    def popen(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``cmd`` inside the namespace in its own session (killable as a group)."""
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen([*self.command_prefix(), *cmd], **kwargs)

    def wait_listening(self, port: int, addr: str = "127.0.0.1", timeout: float = 10.0) -> None:
        """Poll ``ss`` inside the namespace until a TCP socket listens on ``addr:port``."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.run(["ss", "-Hltn", f"sport = :{port}"], check=False).stdout
            if any(f"{addr}:{port}" in line or f"*:{port}" in line for line in out.splitlines()):
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"nothing listens on {addr}:{port} in {self.name}")
            time.sleep(0.02)

    def __repr__(self) -> str:
        return f"NetnsHost({self.name!r}, {self.addr_host!r}, {self.addr_ns!r})"


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``addr`` a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((addr, 0))
        return int(sock.getsockname()[1])


def wait_for_port(addr: str, port: int, timeout: float = 10.0) -> bool:
    """Poll until ``addr:port`` accepts a TCP connection; False if ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)


def is_listening(addr: str, port: int) -> bool:
    """True if a TCP socket in this process's network namespace listens on ``addr:port``.

    Reads ``/proc/net/tcp`` instead of connecting, so a probe never reaches what a listener
    forwards to (a tunnel would otherwise open a channel and a throw-away server connection).
    """
    want_port = f"{port:04X}"
    want_addrs = {socket.inet_aton(addr)[::-1].hex().upper(), "00000000"}
    with open("/proc/net/tcp") as fh:
        next(fh)
        for line in fh:
            local, state = line.split()[1], line.split()[3]
            host_hex, port_hex = local.split(":")
            if state == "0A" and port_hex == want_port and host_hex in want_addrs:
                return True
    return False


def wait_until_listening(addr: str, port: int, timeout: float = 10.0) -> bool:
    """Poll :func:`is_listening` until true; False if ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not is_listening(addr, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _parent_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: split after the last ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """PIDs of all live descendants of ``pid`` (children first-found, breadth-first)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parent_map().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def pids_with_cmdline_containing(needle: str) -> list[int]:
    """PIDs whose command line contains ``needle`` (e.g. a test's unique temp directory)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if needle.encode() in cmdline:
            found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def kill_pids(pids: Sequence[int], timeout: float = 5.0) -> None:
    """SIGTERM ``pids``, wait up to ``timeout`` for them to go, then SIGKILL the rest."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not any(pid_alive(p) for p in pids):
            return


def kill_process_tree(pid: int, timeout: float = 5.0) -> None:
    """Terminate ``pid`` and all its descendants, including ones that called setsid()."""
    kill_pids([pid, *descendants(pid)], timeout=timeout)


def reap_stale_namespaces(prefix: str = NAME_PREFIX) -> list[str]:
    """Delete test namespaces whose owning process (PID in the name) no longer exists.

    A test session killed with SIGKILL runs no finalizers; its namespaces, and the sshd or
    PostgreSQL inside them, would otherwise stay until reboot. Returns the names removed.
    """
    reaped = []
    for name in leftover_namespaces(prefix):
        owner = name[len(prefix) :].split("-", 1)[0]
        if not owner.isdigit() or pid_alive(int(owner)):
            continue
        pids = [int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()]
        if pids:
            kill_pids(pids, timeout=2)
        _ip("netns", "del", name, check=False)
        reaped.append(name)
    return reaped


def leftover_namespaces(prefix: str = NAME_PREFIX) -> list[str]:
    """Names of test namespaces that still exist (for clean-up checks)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]
