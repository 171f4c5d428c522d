"""A real systemd host for integration tests: a podman container that boots systemd as PID 1.

These machines have no systemd as PID 1, so the systemd lookup (`systemctl show`) and the
restart role's systemd path (drop-in + `systemctl restart`) run against a container:

* its root file system is Debian bookworm built by `debootstrap --variant=minbase` from the
  machine's configured Debian mirror (there is no image registry), cached as a tarball under
  ``~/.cache/leaseguard`` (keyed by suite and package list), so a machine pays debootstrap
  once;
* it runs in :class:`PodmanEngine`'s private storage with ``--systemd=always`` and joins a
  :class:`NetnsHost` namespace (``--network ns:...``: the engine allows no other network), so
  it is reachable at the namespace's address like every other test host;
* the test's own :class:`SshServer` runs inside it (``podman exec``; the image's ssh.service
  is masked), with its keys and config in a directory mounted at the same path, so Ansible
  reaches it exactly like a real host: ssh, python3, systemctl.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sandbox.netns import NetnsHost
from sandbox.podman import PODMAN, PRIVATE_VAR_LIB, PodmanEngine
from sandbox.sshd import SshServer

SUITE = "bookworm"
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "openssh-server",
    "openssh-sftp-server",
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
IMAGE = "leaseguard-test/systemd:latest"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "leaseguard"
DEBOOTSTRAP = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
# Changing how the root file system is prepared must change the cache key.
ROOTFS_RECIPE = 2


class SystemdHostError(RuntimeError):
    """The systemd container did not come up (the message says which step failed)."""


def debian_mirror() -> str:
    """The machine's configured Debian mirror (the one apt uses), else deb.debian.org."""
    if mirror := os.environ.get("LEASEGUARD_DEBIAN_MIRROR"):
        return mirror
    for path in SOURCES:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            # deb822 "URIs: <uri>" or one-line "deb [opts] <uri> <suite> ..."
            if words[:1] not in (["URIs:"], ["deb"]):
                continue
            for uri in words[1:]:
                if uri.startswith("http") and uri.rstrip("/").endswith("/debian"):
                    return uri
    return DEFAULT_MIRROR


def rootfs_cache_path() -> Path:
    key = hashlib.sha256(f"{ROOTFS_RECIPE} {SUITE} {' '.join(PACKAGES)}".encode()).hexdigest()
    return CACHE_DIR / f"systemd-rootfs-{key[:16]}.tar"


def _prepare_rootfs(root: Path) -> None:
    """What the image needs beyond the packages: no sshd of its own, no getty, a machine id."""
    masked = root / "etc" / "systemd" / "system"
    for unit in ("ssh.service", "ssh.socket", "getty@tty1.service", "console-getty.service"):
        link = masked / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    # The test's sshd (and Ansible's python) run by `podman exec`, not by a unit.
    (root / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    # Of no use in a test host, and every file of the image is copied per container and
    # deleted again (podman's vfs storage): apt's lists and caches, translations, docs.
    for unused in (
        "var/lib/apt/lists",
        "var/cache/apt",
        "usr/share/locale",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
    ):
        shutil.rmtree(root / unused, ignore_errors=True)


def build_rootfs_tar(dest: Path, *, mirror: str | None = None) -> Path:
    """debootstrap a minimal bookworm with systemd into a tarball at dest (atomically)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=dest.parent) as work:
        root = Path(work) / "root"
        argv = [DEBOOTSTRAP, "--variant=minbase", f"--include={','.join(PACKAGES)}"]
        argv += [SUITE, str(root), mirror or debian_mirror()]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1200)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise SystemdHostError(f"debootstrap failed ({done.returncode}):\n{tail}")
        _prepare_rootfs(root)
        partial = Path(work) / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True
        )
        partial.rename(dest)
    return dest


def cached_rootfs_tar() -> Path:
    """The cached root file system, built once per machine (concurrent sessions wait)."""
    dest = rootfs_cache_path()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR / ".systemd-rootfs.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dest.is_file():
            build_rootfs_tar(dest)
    return dest


def import_systemd_image(engine: PodmanEngine) -> str:
    """Import the cached root file system into engine as :data:`IMAGE`."""
    tarball = str(cached_rootfs_tar())
    engine._run(
        [*PRIVATE_VAR_LIB, PODMAN, "import", "--change", 'CMD ["/sbin/init"]', tarball, IMAGE],
        check=True,
        timeout=300,
    )
    return IMAGE


@dataclass
class SystemdHost:
    """A booted systemd container reachable over SSH at :attr:`addr` (port 22, root)."""

    name: str
    engine: PodmanEngine
    netns: NetnsHost
    sshd: SshServer

    @property
    def addr(self) -> str:
        return self.netns.addr_ns

    def exec(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command in the container (as root, outside any unit)."""
        return self.engine.podman("exec", self.name, *cmd, check=check)

    def write_file(self, path: str, text: str) -> None:
        """Write a file in the container (through `podman exec -i`, as root)."""
        subprocess.run(
            [PODMAN, "exec", "-i", self.name, "sh", "-c", 'cat > "$1"', "sh", path],
            input=text,
            env=self.engine.podman_env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )

    def systemctl_show(self, unit: str, prop: str) -> str:
        return self.exec("systemctl", "show", unit, f"--property={prop}", "--value").stdout.strip()

    def ansible_host_vars(self) -> dict[str, object]:
        """Inventory variables for Ansible's ssh connection (strict host keys)."""
        return {
            "ansible_host": self.addr,
            "ansible_port": self.sshd.port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.sshd.client_key_path),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={self.sshd.known_hosts_path} "
                "-o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes "
                "-o IdentitiesOnly=yes"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
        }


def _wait_booted(engine: PodmanEngine, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        done = engine.podman("exec", name, "systemctl", "is-system-running", check=False)
        state = done.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.2)
    failed = engine.podman("exec", name, "systemctl", "--failed", "--no-legend", check=False)
    raise SystemdHostError(f"systemd in {name} not up in {timeout}s ({state}): {failed.stdout}")


@contextlib.contextmanager
def open_systemd_host(
    engine: PodmanEngine, base_dir: Path, name: str = "sd1", *, boot_timeout: float = 60
) -> Iterator[SystemdHost]:
    """Boot a systemd container with sshd in a fresh namespace; everything removed on exit."""
    # podman's CLI reads the Docker auth file before `run`; the engine's is empty.
    (engine.docker_config_dir / "config.json").write_text("{}")
    with contextlib.ExitStack() as stack:
        netns = NetnsHost.allocate(hostname=name)
        stack.callback(netns.close)
        ssh_dir = base_dir / "ssh"
        ssh_dir.mkdir(parents=True, exist_ok=True)
        engine.podman(
            "run",
            "--detach",
            "--name",
            name,
            "--hostname",
            name,
            "--systemd=always",
            "--network",
            f"ns:/run/netns/{netns.name}",
            "--cgroup-parent",
            f"/{engine.cgroup_parent}",
            "--volume",
            f"{ssh_dir}:{ssh_dir}",
            IMAGE,
            "/sbin/init",
            timeout=120,
        )
        sshd: SshServer | None = None

        def remove() -> None:
            # The container first: its end also ends sshd and the `podman exec` that runs it,
            # which a signal to that podman process alone would take seconds to do.
            engine.podman("rm", "--force", "--time", "0", name, check=False)
            if sshd is not None:
                sshd.stop()

        stack.callback(remove)
        _wait_booted(engine, name, boot_timeout)
        env = [f"{key}={value}" for key, value in engine.session_env.items()]
        in_container = ["env", *env, PODMAN, "exec", name]
        sshd = SshServer(ssh_dir, netns.addr_ns, 22, in_container, alias=name)
        sshd.start(timeout=30)
        yield SystemdHost(name, engine, netns, sshd)
