"""Private to leaseguard.deploy: what action plugins share: leaseguard, run(), runner, database."""

import dataclasses
import difflib
import hashlib
import importlib.util
import json
import logging
import os
import re
import secrets
import shlex
import sys
from contextlib import contextmanager, nullcontext, suppress
from importlib import metadata
from pathlib import Path

import yaml
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.leaseguard.deploy.plugins.module_utils import _specs

HERE = Path(os.path.abspath(__file__)).parent
COLLECTION_ROOT = HERE.parents[1]
# Appended, not inserted: the carried copy stands in for a missing package, shadowing nothing.
CARRIED = importlib.util.find_spec("leaseguard") is None and (HERE / "_vendor/leaseguard").is_dir()
if CARRIED:
    sys.path.append(str(HERE / "_vendor"))

LEASEGUARD_IMPORT_ERROR = None
try:
    import leaseguard.api as api  # pylint: disable=consider-using-from-import
    from leaseguard.api import LeaseguardError

    # Loaded now, so a missing requirement (psycopg, Fabric) is named before any task runs.
    _LOADED = (api.task_session, api.drain_host, api.lookup_report)
except ImportError as exc:  # the controller's Python lacks the leaseguard package
    LEASEGUARD_IMPORT_ERROR = exc
    api = None

    class LeaseguardError(Exception):  # type: ignore[no-redef]
        """Stand-in so the plugins import; require_leaseguard() fails every task first."""


display = Display()


def require_leaseguard():
    """Fail the task, saying what to install, without the package; warn on a mismatch."""
    if (exc := LEASEGUARD_IMPORT_ERROR) is not None:
        missing = "the leaseguard Python package is"
        if CARRIED:  # the Galaxy tarball carries the core: only its requirements can be missing
            missing = "the Python requirements of leaseguard.deploy are"
        raise AnsibleActionFail(
            f"{missing} required on the controller ({type(exc).__name__}: {exc}): install "
            f"them into the Python that runs ansible ({sys.executable}) with: {install_hint()}",
            orig_exc=exc,
        )
    if INSTALL_WARNING:
        display.warning(f"leaseguard: {INSTALL_WARNING}")


def collection_identity(root):
    """(version, sha256 of FILES.json) of a collection; no hash in a source checkout."""
    with suppress(FileNotFoundError):
        manifest = json.loads(Path(root, "MANIFEST.json").read_bytes())
        files = Path(root, "FILES.json").read_bytes()
        return manifest["collection_info"]["version"], hashlib.sha256(files).hexdigest()
    try:
        galaxy = Path(root, "galaxy.yml").read_text(encoding="utf-8")
        return str(yaml.safe_load(galaxy)["version"]), None
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None, None


def install_hint():
    if (requirements := COLLECTION_ROOT / "requirements.txt").is_file():
        return f"pip install -r {requirements}"
    version = collection_identity(COLLECTION_ROOT)[0]
    return f"pip install 'leaseguard[ansible]{f'=={version}' if version else ''}'"


def install_warning():
    """A mismatch between the running collection and the leaseguard package (None if none)."""
    try:
        dist = metadata.distribution("leaseguard")
    except metadata.PackageNotFoundError:
        return None
    version, files_hash = collection_identity(COLLECTION_ROOT)
    if version != dist.version:
        return (
            f"leaseguard.deploy {version} runs from {COLLECTION_ROOT}, but the leaseguard "
            f"Python package is {dist.version}: the plugins and the core they call come from "
            f"different releases. Install matching versions ({install_hint()})."
        )
    shipped = os.path.realpath(str(dist.locate_file("ansible_collections/leaseguard/deploy")))
    same = files_hash is None or shipped == os.path.realpath(COLLECTION_ROOT)
    if same or collection_identity(shipped)[1] in (None, files_hash):
        return None
    return (
        f"two different copies of leaseguard.deploy {version}: ansible runs {COLLECTION_ROOT} "
        f"(first on the collections path), the leaseguard package ships {shipped}. "
        "Remove one (ansible-galaxy collection verify --offline shows which was changed)."
    )


# Found once in ansible-playbook's process, inherited by every forked worker (~90 ms a task).
INSTALL_WARNING = install_warning()

RESUME_HINT = (
    "`ansible-playbook leaseguard.deploy.resume -i <inventory>` (or `leaseguard resume` with "
    "the same database options)"
)


class LeaseguardAction(ActionBase):
    """Runs act() on the arguments its module's spec admits; a LeaseguardError fails the task."""

    failure_what = "check"  # only a check's failure carries `decision: failed`
    needs_leaseguard = True  # False: runs without the leaseguard package (check_vars)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.module = cls.__module__.rpartition(".")[2]  # its spec: plugins/modules/<module>.yml
        cls.role_variables = _specs.role_variables(cls.module)  # the spec parsed before forks

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self.needs_leaseguard:
            require_leaseguard()
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        given = self._task.args
        if boolean(given.get("from_role_vars", False), strict=False):
            # Only the variables that are set are templated (all would cost ~0.2 s a host).
            filled = {
                option: self._templar.template(task_vars[variable])
                for option, variable in self.role_variables.items()
                if option not in given and variable in task_vars
            }
            self._task.args = {**filled, **given}
        spec, options = _specs.module_spec(self.module)
        try:
            if self.needs_leaseguard:
                # Before the spec's float()/int(), which read any script's digits as numbers.
                api.refuse_non_ascii_numbers(self._task.args, spec)
            args = self.validate_argument_spec(spec, **options)[1]
            if args.get("check_vars"):  # check_vars' own check, first, in this same task
                checked = checked_variables(task_vars, template=self._templar.template)
                if checked.get("failed"):
                    refused = {"decision": "failed"} if self.failure_what == "check" else {}
                    return {**result, **checked, **refused}
            result.update(self.act(args, host, task_vars))
        except LeaseguardError as exc:
            result.update(failure(exc, host, what=self.failure_what))
        return result


def failure(exc, host, what="check"):
    """A failed task result; a check's decision is 'failed', never 'proceed'."""
    msg = f"leaseguard: {what} failed on {host} ({exc.kind}): {exc}"
    result = {**api.failure_result(exc, host), "failed": True, "changed": False, "msg": msg}
    if what != "check":
        del result["decision"]  # only a check decides
    return result


def contract_from(args):
    """The contract from the task's options, without the None the argument spec fills in."""
    keys = {key.split(".")[0] for key in api.CONFIG_KEYS}
    return api.load_contract(_without_none({key: args.get(key) for key in keys}))


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def checked_variables(task_vars, allow=(), template=None):
    """The task's leaseguard_* variables, failed on one unknown to the collection (Ansible drops
    a mistyped one silently) or, with `template`, on a guard role variable of the wrong type, said
    without its value (a password?): the roles that import the guard skip its validation."""
    known = KNOWN_VARIABLES | set(allow)
    checked = sorted(name for name in task_vars if name.startswith("leaseguard_"))
    unknown = {}
    for name in (name for name in checked if name not in known):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        unknown[name] = close[0] if close else None
    result = {"changed": False, "checked": checked}
    if unknown:
        parts = [
            f"{name} (did you mean {near}?)" if near else f"{name} (no known name is close)"
            for name, near in unknown.items()
        ]
        msg = (
            f"leaseguard: unknown variable(s): {'; '.join(parts)}. Nothing was run. The known "
            "ones: ansible-doc -t role leaseguard.deploy.restart (or .guard, .migrate)"
        )
        return {**result, "failed": True, "unknown": unknown, "msg": msg}
    specs = _specs.spec_of(_specs.guard_role_options())
    wrong = {}
    for name in (n for n in checked if template and (n in specs or n.endswith("_command"))):
        try:
            value = template(task_vars[name])
        except AnsibleError:  # an undefined template: the task that reads it says so
            continue
        spec = specs.get(name)
        if name.endswith("_command") and isinstance(value, str):
            # Ansible's list type takes a string as ONE element: a program named "sh -c ..."
            # that fails only when run, after intake was held (a resume: never given back).
            wrong[name] = "list of str (an argv, not one string)"
        elif spec and ArgumentSpecValidator({name: spec}).validate({name: value}).error_messages:
            wanted = f"{spec['type']} of {spec['elements']}" if "elements" in spec else spec["type"]
            if "choices" in spec:
                wanted = f"one of {', '.join(map(str, spec['choices']))}"
            wrong[name] = wanted
    if wrong:
        said = "; ".join(f"{name} (wants {wanted})" for name, wanted in wrong.items())
        msg = (
            f"leaseguard: variable(s) of the wrong type: {said}. Nothing was run. Every "
            "variable's type: ansible-doc -t role leaseguard.deploy.guard"
        )
        result.update(failed=True, wrong_type=wrong, msg=msg)
    return result


# A name the roles define: a key (argument_specs, defaults, vars, set_fact) or a register,
# first in its line or after a list's dash (a Jinja line that only mentions one is no key).
_DEFINED = re.compile(
    r"""^\s*(?:-\s+)?(?:register:\s*["']?(leaseguard_\w+)|["']?(leaseguard_\w+)["']?\s*:)""",
    re.MULTILINE,
)


def known_variables():
    """Every leaseguard_* name the collection's roles define or register, or its playbooks use."""
    names = set()
    for path in COLLECTION_ROOT.glob("roles/*/*/*.yml"):
        names.update(m[1] or m[2] for m in _DEFINED.finditer(path.read_text(encoding="utf-8")))
    for path in COLLECTION_ROOT.glob("playbooks/*.yml"):
        names.update(re.findall(r"\bleaseguard_[a-z0-9_]+\b", path.read_text(encoding="utf-8")))
    return frozenset(names)


KNOWN_VARIABLES = known_variables()  # read once in ansible-playbook's process, before it forks


# OpenSSH's (and paramiko's) words for a refused host key, and what to do (never the raw text).
_REPLACE_KEY = (
    "if the change is expected, verify the new key and replace the old one "
    "(ssh-keygen -R {host}, then ssh-keyscan)"
)
_HOST_KEY_CAUSES = {
    "remote host identification has changed": "host key does not match known_hosts (it "
    "changed since it was recorded): " + _REPLACE_KEY,
    "host key mismatch": "host key does not match known_hosts: " + _REPLACE_KEY,
    "host key verification failed": "host key verification failed (not in known_hosts, or "
    "not matching it): add the verified key to known_hosts (ssh-keyscan)",
}
_COMMAND_FAILED = "running a command over its Ansible connection failed"


class AnsibleRunner:
    """Runs commands on the host through the task's own connection (become, jump hosts)."""

    def __init__(self, action, label):
        self._action, self.label = action, label
        self.becomes = getattr(action._connection, "become", None) is not None

    def run(self, argv):
        # sudoable only with become, as its tty merges stderr into stdout (CRLF): tty_argv splits.
        nonce = secrets.token_hex(8) if self.becomes else None
        command = api.tty_argv(tuple(argv), nonce) if nonce else argv
        try:
            result = self._action._low_level_execute_command(
                shlex.join(command), sudoable=self.becomes
            )
        except AnsibleError as exc:  # AnsibleConnectionFailure too
            text = str(exc).lower()
            causes = (cause for needle, cause in _HOST_KEY_CAUSES.items() if needle in text)
            cause = next(causes, _COMMAND_FAILED).format(host=self.label)
            raise api.TunnelError(f"host {self.label}: {cause} ({type(exc).__name__})") from None
        ran = api.CommandResult(
            int(result.get("rc", 1)), result.get("stdout", ""), result.get("stderr", "")
        )
        return api.split_tty(ran, nonce) if nonce else ran


def conninfo_from(args):
    """dbname/user/password and the other libpq keywords of `dsn` as one conninfo."""
    from psycopg import ProgrammingError, conninfo  # here: check_vars runs without psycopg

    given = {"dbname": args["db_name"], "user": args["db_user"], "password": args["db_password"]}
    try:
        made = conninfo.make_conninfo(args["dsn"] or "", **{k: v for k, v in given.items() if v})
    except ProgrammingError:
        raise api.invalid_dsn(args["dsn"] or "") from None
    api.reject_hostaddr(made)
    return made


def ssh_target(connection, play_context):
    """Host and SSH options for the tunnel, from the host's own Ansible connection settings."""

    def option(name):
        with suppress(KeyError):
            return connection.get_option(name)
        return None

    names = ("ssh_common_args", "ssh_extra_args", "ssh_args")
    parsed = api.parse_openssh_args(" ".join(str(option(name) or "") for name in names))
    if "proxycommand" in parsed:
        raise api.ConfigError(
            "ProxyCommand in the host's ssh arguments cannot carry the database tunnel; "
            "use ProxyJump (-J) instead"
        )
    port = option("port") or parsed.get("port")
    options = api.SshOptions(
        user=option("remote_user") or parsed.get("user"),
        port=int(port) if port else None,
        key_filename=option("private_key_file") or parsed.get("identityfile"),
        known_hosts=parsed.get("userknownhostsfile"),
        # An unknown key passes only if the host's own Ansible settings say so; a changed key never.
        accept_unknown_host_keys=option("host_key_checking") is False
        or parsed.get("stricthostkeychecking", "").lower() in ("no", "off", "accept-new"),
        gateway=parsed.get("proxyjump"),
        connect_timeout_s=int(option("timeout") or 10),
    )
    return str(option("host") or play_context.remote_addr), options


def tunnels(action, args):
    """Whether the database is reached through a tunnel (not with `tunnel: false` or `local`)."""
    transport = str(getattr(action._connection, "transport", "") or "").rsplit(".", 1)[-1]
    return bool(args["tunnel"]) and transport != "local"


@contextmanager
def database_path(action, args, *, probe=True):
    """(conninfo, tunnel or None) as the controller reaches the database, closed on exit."""
    conninfo, db = conninfo_from(args), (args["db_host"], args["db_port"])
    if not tunnels(action, args):
        path = nullcontext((api.direct_conninfo(conninfo, *db), None))
    else:
        address = api.DatabaseAddress(*api.tunnel_far_end(conninfo, *db))
        host, options = ssh_target(action._connection, action._play_context)
        if args.get("connect_timeout_s"):
            # The SSH connect fits in a poll's budget, so a drain can reopen it within one poll.
            timeout = min(options.connect_timeout_s, int(args["connect_timeout_s"]))
            options = dataclasses.replace(options, connect_timeout_s=timeout)
        path = api.tunnelled(api.make_connection(host, options), conninfo, address, probe=probe)
    with path as opened:
        yield opened


@contextmanager
def database_conninfo(action, args):
    with database_path(action, args) as (conninfo, _tunnel):
        yield conninfo


@contextmanager
def drain_events(label):
    """The drain's log lines (INFO and up: idle polls never), shown live and yielded as a list."""
    lines, logger = [], logging.getLogger("leaseguard.drain")

    class Shown(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
            display.display(f"leaseguard [{label}]: {lines[-1]}")

    handler, previous = Shown(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
