"""A private, throw-away container engine (podman behind a Docker API) for sandbox and tests.

:class:`PodmanEngine` runs ``podman system service`` on a unix socket with its own storage,
locks, events and network config under ``base_dir``, so nothing touches the machine's default
podman storage and concurrent test sessions do not share state. The ``docker`` CLI drives it
through :attr:`PodmanEngine.docker_env` (``DOCKER_HOST=unix://...``); the ``podman`` CLI
through :attr:`PodmanEngine.podman_env`.

Machine quirks this works around:
crun fails on this kernel's limits, so the runtime is runc with explicit ulimits; there is no
registry, so the test image is imported from a busybox-static rootfs; netavark would add
iptables/nft chains and turn on ip_forward machine-wide, so the engine uses the CNI backend
with no plugins (any network but ``none`` fails loudly) and ``run_backend`` passes
``--network none``; image imports would write /var/lib/containers/cache, so they run with a
private tmpfs over /var/lib; runc would keep state in /run/runc, so a wrapper points it here;
exec sessions leave ``conmon`` processes behind for 300 s, so teardown kills every process
whose command line names this engine's directory; cgroupfs leaves empty cgroup directories,
so containers get a per-engine ``--cgroup-parent`` that teardown removes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sandbox.netns import kill_pids, kill_process_tree, pids_with_cmdline_containing

PODMAN = "/usr/bin/podman"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
DOCKER = shutil.which("docker") or "/usr/local/bin/docker"
BUSYBOX = "/bin/busybox"
IMAGE = "leaseguard-test/backend:latest"
CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_BACKEND_ENV = {"APP_TASK_TIMEOUT_S": "3600"}

# PID 1 is a shell that exits on SIGTERM, so `docker stop`/`restart` take milliseconds instead of
# the 10 s kill timeout a bare `sleep` as PID 1 would cost (PID 1 ignores unhandled signals).
BACKEND_CMD = ["sh", "-c", 'trap "exit 0" TERM INT; sleep 2147483647 & wait']

PRIVATE_VAR_LIB = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    # -n: no /run/mount/utab entry (libmount would create /run/mount for it).
    'mount -n -t tmpfs -o size=16m,mode=0755 leaseguard-test /var/lib && exec "$@"',
    "sh",
]

# busybox has no printenv, and the documented lookup is `docker exec backend printenv VAR`.
# Same contract as coreutils: print each named variable, exit 1 if any is unset.
PRINTENV = """#!/bin/sh
if [ "$#" -eq 0 ]; then exec env; fi
exec awk 'BEGIN {
  rc = 0
  for (i = 1; i < ARGC; i++) { if (ARGV[i] in ENVIRON) print ENVIRON[ARGV[i]]; else rc = 1 }
  exit rc
}' "$@"
"""


class PodmanError(RuntimeError):
    """A podman/docker command failed (the message carries the command and its stderr)."""


def _busybox_applets() -> list[str]:
    out = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout
    return [name for name in out.split() if name and "/" not in name]


def build_rootfs_tar(dest: Path) -> Path:
    """Write a minimal rootfs tarball: busybox-static, its applets as links, and ``printenv``."""

    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(dest, "w") as tar:
        for d in ("bin", "etc", "root", "run", "var", "proc", "sys", "dev", "usr", "usr/bin"):
            add_dir(tar, d)
        add_dir(tar, "tmp", 0o1777)
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in _busybox_applets():
            if applet in ("busybox", "printenv"):
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, "busybox", 0o777
            tar.addfile(link)
        add_file(tar, "bin/printenv", PRINTENV.encode(), 0o755)
        add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add_file(tar, "etc/group", b"root:x:0:\n")
    return dest


def _cgroup_controllers() -> list[Path]:
    if not CGROUP_ROOT.is_dir():
        return []
    return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]


def _remove_cgroup(name: str) -> None:
    """Remove ``/<name>`` (and libpod's ``conmon`` child) in every controller; ignore busy."""
    for controller in _cgroup_controllers():
        top = controller / name
        if not top.is_dir():
            continue
        # Depth-first: a cgroup directory can only be removed once it has no children.
        for child in sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path) + "/"
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            mount_point = line.split()[4].replace("\\040", " ")
            if mount_point.startswith(prefix):
                found.append(mount_point)
    return sorted(found, key=len, reverse=True)


# Where a podman/runc/netavark run leaves traces outside its own directories by default.
WATCHED_PATHS = (
    "/var/lib/containers",
    "/var/lib/cni",
    "/run/containers",
    "/run/libpod",
    "/run/runc",
    "/run/mount",
    "/dev/shm/libpod_lock",
)


def _machine_state() -> dict[str, str]:
    """A snapshot of the machine-wide state a container engine could change."""

    def out(argv: list[str]) -> str:
        if not shutil.which(argv[0]):
            return ""
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    state = {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "iptables": out(["iptables", "-S"]) + out(["iptables", "-t", "nat", "-S"]),
        "nft": out(["nft", "list", "ruleset"]),
        "libpod_parent": str(any((c / "libpod_parent").exists() for c in _cgroup_controllers())),
    }
    state.update({path: str(Path(path).exists()) for path in WATCHED_PATHS})
    return state


class PodmanEngine:
    """A podman API service on ``<base_dir>/podman.sock`` with storage under ``base_dir``.

    Nothing happens in the constructor: call :meth:`start` (or use ``with``) and :meth:`stop`.

    :param base_dir: an empty directory owned by the test session.
    :param build_image: import :data:`IMAGE` during :meth:`start`.
    """

    def __init__(self, base_dir: str | os.PathLike[str], *, build_image: bool = True) -> None:
        self.base_dir = Path(base_dir)
        self.build_image = build_image
        self.socket_path = self.base_dir / "podman.sock"
        self.containers_conf = self.base_dir / "containers.conf"
        self.storage_conf = self.base_dir / "storage.conf"
        self.log_path = self.base_dir / "service.log"
        self.docker_config_dir = self.base_dir / "docker-config"
        self.runc_wrapper = self.base_dir / "bin" / "runc"
        # Short and unique: names this engine's cgroups so teardown removes only its own.
        self.cgroup_parent = f"leaseguard-test-{secrets.token_hex(4)}"
        self.image = IMAGE
        self.timings: dict[str, float] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._active = False
        self._state_before: dict[str, str] = {}
        self._owned_dirs = [
            self.base_dir / d
            for d in ("root", "runroot", "tmp", "volumes", "networks", "runc", "no-cni-plugins")
        ]

    # -- environments ----------------------------------------------------------------------

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def session_env(self) -> dict[str, str]:
        """Only the variables that point clients at this engine (e.g. for sshd ``SetEnv``)."""
        return {
            "DOCKER_HOST": self.docker_host,
            "DOCKER_CONFIG": str(self.docker_config_dir),
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
        }

    @property
    def docker_env(self) -> dict[str, str]:
        """``os.environ`` plus :attr:`session_env`: the ``docker`` CLI talks to this engine."""
        return {**os.environ, **self.session_env}

    @property
    def podman_env(self) -> dict[str, str]:
        """Environment for a local ``podman`` CLI on this engine's storage (same as docker's)."""
        return self.docker_env

    # -- lifecycle -------------------------------------------------------------------------

    def _write_config(self) -> None:
        b = self.base_dir
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.docker_config_dir.mkdir(exist_ok=True)
        self.containers_conf.write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
            'log_driver = "k8s-file"\n'
            'netns = "none"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{b}/events.log"\n'
            f'tmp_dir = "{b}/tmp"\n'
            f'static_dir = "{b}/root/libpod"\n'
            f'volume_path = "{b}/volumes"\n'
            # The default shm lock segment (/dev/shm/libpod_lock) is shared by every podman
            # on the machine; file locks under tmp_dir keep concurrent engines apart.
            'lock_type = "file"\n'
            "num_locks = 256\n"
            "[engine.runtimes]\n"
            f'runc = ["{self.runc_wrapper}"]\n'
            "[network]\n"
            f'network_config_dir = "{b}/networks"\n'
            # Bridge networking would run netavark, which adds iptables/nft chains and turns
            # on ip_forward for the whole machine. CNI with no plugins makes any network but
            # "none" fail loudly instead.
            'network_backend = "cni"\n'
            f'cni_plugin_dirs = ["{b}/no-cni-plugins"]\n'
        )
        (b / "no-cni-plugins").mkdir(exist_ok=True)
        # runc keeps container state under /run/runc unless told otherwise.
        self.runc_wrapper.parent.mkdir(exist_ok=True)
        self.runc_wrapper.write_text(f'#!/bin/sh\nexec {RUNC} --root "{b}/runc" "$@"\n')
        self.runc_wrapper.chmod(0o755)
        # vfs: plain directory copies (the image is 2 MB), so no overlay mounts can leak.
        self.storage_conf.write_text(
            f'[storage]\ndriver = "vfs"\nrunroot = "{b}/runroot"\ngraphroot = "{b}/root"\n'
        )

    def start(self, timeout: float = 30.0) -> PodmanEngine:
        """Write the config, start the API service, import the test image; wait until ready."""
        t0 = time.monotonic()
        self._state_before = _machine_state()
        self._active = True
        self._write_config()
        try:
            with self.log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    [PODMAN, "system", "service", "--time=0", self.docker_host],
                    env=self.podman_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            if self.build_image:
                t1 = time.monotonic()
                self.import_image()
                self.timings["image"] = time.monotonic() - t1
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self._proc is not None and self._proc.poll() is not None:
                raise PodmanError(f"podman service exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise PodmanError(f"podman service not ready in {timeout}s: {self.log_tail()}")
            time.sleep(0.02)

    def ping(self) -> bool:
        """True if the Docker-compatible API answers ``GET /_ping`` with ``OK``."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(str(self.socket_path))
                sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
        except OSError:
            return False
        return data.startswith(b"HTTP/1.") and data.rstrip().endswith(b"OK")

    def import_image(self) -> None:
        """Build :data:`IMAGE` from a busybox-static rootfs tarball (no registry needed)."""
        tar = build_rootfs_tar(self.base_dir / "rootfs.tar")
        # Image copies record blob digests in /var/lib/containers/cache whatever the storage
        # root (containers/image's root default); a tmpfs over /var/lib in a private mount
        # namespace keeps that cache off the machine.
        self._run(
            [
                *PRIVATE_VAR_LIB,
                PODMAN,
                "import",
                "--change",
                f"CMD {json.dumps(BACKEND_CMD)}",
                "--change",
                "WORKDIR /",
                str(tar),
                self.image,
            ],
            check=True,
            timeout=60,
        )
        tar.unlink()

    def stop(self) -> None:
        """Remove containers, stop the service and its leftovers, delete storage; idempotent."""
        if not self._active:
            return
        self._active = False
        with contextlib.suppress(PodmanError, subprocess.TimeoutExpired):
            self.podman("rm", "--all", "--force", "--time", "0", timeout=30)
        if self._proc is not None:
            kill_process_tree(self._proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self._proc = None
        # conmon double-forks away from the service (exec sessions linger 300 s) and its
        # command line names our directories: that is how we know which ones are ours.
        leftovers = pids_with_cmdline_containing(str(self.base_dir) + "/")
        for pid in leftovers:
            kill_process_tree(pid, timeout=2)
        kill_pids(leftovers, timeout=2)
        for mount_point in _mounts_under(self.base_dir):
            subprocess.run(["umount", "-l", mount_point], check=False, capture_output=True)
        for d in self._owned_dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.socket_path.unlink(missing_ok=True)
        _remove_cgroup(self.cgroup_parent)
        if self._state_before.get("libpod_parent") == "False":
            # Created by a container run without --cgroup-parent; rmdir fails if still in use.
            _remove_cgroup("libpod_parent")

    def __enter__(self) -> PodmanEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def machine_changes(self) -> list[str]:
        """Machine-wide differences since :meth:`start` (firewall, ip_forward, paths).

        Empty when the engine kept to its directory. Other processes on the machine can
        cause differences too, so callers should filter for what they care about.
        """
        after = _machine_state()
        before = self._state_before
        changes = []
        for key, value in after.items():
            if key in ("iptables", "nft"):
                old = set(before.get(key, "").splitlines())
                new = set(value.splitlines())
                changes += [f"{key} +{line.strip()}" for line in sorted(new - old)]
                changes += [f"{key} -{line.strip()}" for line in sorted(old - new)]
            elif before.get(key) != value:
                changes.append(f"{key}: {before.get(key)} -> {value}")
        return changes

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- clients ---------------------------------------------------------------------------

    def _run(
        self, argv: Sequence[str], *, check: bool, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            list(argv),
            env=self.docker_env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise PodmanError(
                f"{' '.join(argv[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    def podman(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the local ``podman`` CLI on this engine's storage."""
        return self._run([PODMAN, *args], check=check, timeout=timeout)

    def docker(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``docker`` CLI against this engine's API socket."""
        return self._run([DOCKER, *args], check=check, timeout=timeout)

    def run_backend(
        self,
        name: str = "backend",
        env: Mapping[str, str] | None = None,
        network: str = "none",
        *,
        image: str | None = None,
        command: Sequence[str] = (),
        extra_args: Sequence[str] = (),
    ) -> str:
        """Start a long-lived detached container; returns its id.

        :param env: container environment; defaults to ``APP_TASK_TIMEOUT_S=3600``. Pass ``{}``
            for a backend without the variable.
        :param network: ``none`` keeps netavark (iptables, ip_forward) out of the picture.
        """
        env = DEFAULT_BACKEND_ENV if env is None else env
        argv = ["run", "--detach", "--name", name, "--network", network]
        argv += ["--cgroup-parent", f"/{self.cgroup_parent}"]
        for key, value in env.items():
            argv += ["--env", f"{key}={value}"]
        argv += [*extra_args, image or self.image, *command]
        return self.docker(*argv).stdout.strip()

    def restart(self, name: str, timeout_s: int = 5) -> None:
        """Restart a container (its ``State.StartedAt`` moves forward)."""
        self.docker("restart", "--time", str(timeout_s), name)

    def remove(self, name: str) -> None:
        """Force-remove a container; no error if it does not exist."""
        self.docker("rm", "--force", name, check=False)

    def inspect(self, name: str) -> dict[str, Any]:
        """``docker inspect`` of one container, parsed."""
        data = json.loads(self.docker("inspect", "--type", "container", name).stdout)
        return dict(data[0])

    def exec(self, name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``docker exec`` a command in a running container."""
        return self.docker("exec", name, *cmd, check=check)

    def __repr__(self) -> str:
        return f"PodmanEngine({str(self.base_dir)!r})"
