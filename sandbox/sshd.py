"""A real OpenSSH server for the sandbox and the tests, with throw-away keys and client files.

:class:`SshServer` writes a host key, a client key pair, ``authorized_keys``, an
``sshd_config``, a ``known_hosts`` line for the host key and a client ``ssh_config``, then
runs ``/usr/sbin/sshd -D -e`` as a child process (optionally inside a network namespace via
``command_prefix``). Clients (Fabric, paramiko, OpenSSH, Ansible) get strict host-key
checking from the files it writes.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import fabric
import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sandbox.netns import kill_process_tree, wait_for_port

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


class SshdError(RuntimeError):
    """sshd did not start (the message carries the tail of its log)."""


def write_ed25519_keypair(private_path: Path, comment: str = "leaseguard-test") -> str:
    """Write an unencrypted OpenSSH ed25519 private key (mode 0600) and its ``.pub``.

    Returns the public key line (``ssh-ed25519 AAAA... comment``).
    """
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    line = f"{public.decode()} {comment}"
    Path(f"{private_path}.pub").write_text(line + "\n")
    return line


def known_hosts_name(addr: str, port: int) -> str:
    """The host field OpenSSH and paramiko look up: ``addr`` on port 22, else ``[addr]:port``."""
    return addr if port == 22 else f"[{addr}]:{port}"


class SshServer:
    """An sshd listening on ``listen_addr:port`` that lets ``root`` in with a test key.

    Nothing happens in the constructor: call :meth:`start` (or use ``with``) and :meth:`stop`.

    :param base_dir: an empty directory owned by the test; every file goes there.
    :param listen_addr: address sshd binds (and the address clients use).
    :param port: TCP port sshd binds.
    :param command_prefix: argv prefix for sshd, e.g. ``NetnsHost.command_prefix()`` to run it
        inside a namespace.
    :param alias: ``Host`` name written in :attr:`ssh_config_path`.
    :param session_env: variables every SSH session gets (sshd ``SetEnv``), e.g. the
        ``DOCKER_HOST`` of a test container engine, as a real host's login environment would.
    :param reachable: whether the test process can connect to ``listen_addr`` directly
        (False for a loopback address inside a namespace); readiness is then judged by the
        pid file, which sshd writes only after binding its listeners.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        listen_addr: str,
        port: int,
        command_prefix: Sequence[str] = (),
        *,
        alias: str = "app1",
        session_env: Mapping[str, str] | None = None,
        reachable: bool = True,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.listen_addr = listen_addr
        self.port = port
        self.command_prefix = list(command_prefix)
        self.alias = alias
        self.session_env = dict(session_env or {})
        self.reachable = reachable
        self.host_key_path = self.base_dir / "ssh_host_ed25519_key"
        self.client_key_path = self.base_dir / "id_ed25519"
        self.authorized_keys_path = self.base_dir / "authorized_keys"
        self.config_path = self.base_dir / "sshd_config"
        self.pid_path = self.base_dir / "sshd.pid"
        self.log_path = self.base_dir / "sshd.log"
        self.known_hosts_path = self.base_dir / "known_hosts"
        self.ssh_config_path = self.base_dir / "ssh_config"
        self.host_public_key = ""
        self.client_public_key = ""
        self._proc: subprocess.Popen[bytes] | None = None

    # -- files -----------------------------------------------------------------------------

    def _write_files(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.host_public_key = write_ed25519_keypair(self.host_key_path, "leaseguard-test-host")
        self.client_public_key = write_ed25519_keypair(self.client_key_path, "leaseguard-test")
        self.authorized_keys_path.write_text(self.client_public_key + "\n")
        host_field = known_hosts_name(self.listen_addr, self.port)
        key_type, key_b64 = self.host_public_key.split()[:2]
        self.known_hosts_path.write_text(f"{host_field} {key_type} {key_b64}\n")
        # sshd keeps only the first SetEnv line it reads: all variables go on one line.
        set_env = (
            "SetEnv " + " ".join(f'"{k}={v}"' for k, v in self.session_env.items()) + "\n"
            if self.session_env
            else ""
        )
        self.config_path.write_text(
            f"ListenAddress {self.listen_addr}\n"
            f"Port {self.port}\n"
            f'HostKey "{self.host_key_path}"\n'
            f'PidFile "{self.pid_path}"\n'
            f'AuthorizedKeysFile "{self.authorized_keys_path}"\n'
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            # The test tree lives under /tmp; with StrictModes its permissions would be judged.
            "StrictModes no\n"
            # No PAM stack is configured for a test sshd; key auth does not need one.
            "UsePAM no\n"
            "AllowTcpForwarding yes\n"
            "PrintMotd no\n"
            "PrintLastLog no\n"
            "UseDNS no\n"
            "LogLevel VERBOSE\n"
            # Parallel Ansible forks and Fabric groups open many sessions at once.
            "MaxStartups 64:30:128\n"
            "MaxSessions 64\n"
            f"Subsystem sftp {SFTP_SERVER}\n"
            f"{set_env}"
        )
        self.ssh_config_path.write_text(
            f"Host {self.alias}\n"
            f"    HostName {self.listen_addr}\n"
            f"    Port {self.port}\n"
            "    User root\n"
            f'    IdentityFile "{self.client_key_path}"\n'
            "    IdentitiesOnly yes\n"
            f'    UserKnownHostsFile "{self.known_hosts_path}"\n'
            "    GlobalKnownHostsFile /dev/null\n"
            "    StrictHostKeyChecking yes\n"
            "    BatchMode yes\n"
            "    ConnectTimeout 10\n"
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> SshServer:
        """Write the files, start sshd and return once it accepts connections."""
        self._write_files()
        # Privilege separation directory; Debian creates it only through its service unit.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        test = subprocess.run(
            [SSHD, "-t", "-f", str(self.config_path)], capture_output=True, text=True, check=False
        )
        if test.returncode != 0:
            raise SshdError(f"sshd -t rejected {self.config_path}: {test.stderr.strip()}")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [*self.command_prefix, SSHD, "-D", "-e", "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not (self.pid_path.exists() and self.pid_path.read_text().strip()):
            self._raise_if_exited()
            if time.monotonic() > deadline:
                raise SshdError(f"sshd wrote no pid file in {timeout}s: {self.log_tail()}")
            time.sleep(0.01)
        if self.reachable:
            remaining = max(deadline - time.monotonic(), 0.5)
            if not wait_for_port(self.listen_addr, self.port, timeout=remaining):
                raise SshdError(f"sshd not accepting on port {self.port}: {self.log_tail()}")

    def _raise_if_exited(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise SshdError(f"sshd exited with {self._proc.returncode}: {self.log_tail()}")

    def stop(self) -> None:
        """Stop sshd and every session it started; idempotent."""
        if self._proc is not None:
            # Connection handlers call setsid(), so killing the process group is not enough.
            kill_process_tree(self._proc.pid)
            self._proc.wait(timeout=10)
            self._proc = None
        self.pid_path.unlink(missing_ok=True)

    def __enter__(self) -> SshServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- clients ---------------------------------------------------------------------------

    def connect_kwargs(self) -> dict[str, Any]:
        """paramiko ``connect`` keyword arguments for the test key (no agent, no other keys)."""
        return {
            "key_filename": str(self.client_key_path),
            "look_for_keys": False,
            "allow_agent": False,
        }

    def connection(self, *, strict: bool = True, **kwargs: Any) -> fabric.Connection:
        """A ``fabric.Connection`` to this server as root.

        Fabric's default policy accepts any host key; with ``strict`` (default) the client
        loads :attr:`known_hosts_path` and rejects unknown keys, like ``StrictHostKeyChecking``.
        Unless ``config`` is given, ``run.in_stream`` is False: under pytest's output capture,
        invoke's stdin-forwarding thread would fail the command.
        """
        kwargs.setdefault("user", "root")
        kwargs.setdefault("connect_timeout", 10)
        # Under pytest's capture, invoke's stdin-forwarding thread fails on read ("reading from
        # stdin while output is captured"): test connections never forward local stdin.
        kwargs.setdefault("config", fabric.Config(overrides={"run": {"in_stream": False}}))
        connect_kwargs = {**self.connect_kwargs(), **kwargs.pop("connect_kwargs", {})}
        conn = fabric.Connection(
            self.listen_addr, port=self.port, connect_kwargs=connect_kwargs, **kwargs
        )
        if strict:
            conn.client.load_host_keys(str(self.known_hosts_path))
            conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return conn

    def __repr__(self) -> str:
        return f"SshServer({self.listen_addr!r}, {self.port})"
