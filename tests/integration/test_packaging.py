"""The collection leaseguard.deploy is visible to ansible from the wheel and from the work tree.

The wheel is built from a copy of the files git knows about (what a fresh clone in CI has),
installed with `--no-deps` into a fresh venv next to ansible-core, and inspected with that
venv's own ansible-galaxy/ansible-doc: a plain `pip install leaseguard` must be enough.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from sandbox.pgcluster import SUPERUSER
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.collection_tools import collection_tools
from tests.support.pg_fixtures import PgDatabase

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "leaseguard.deploy"
COLLECTION_DIR = "ansible_collections/leaseguard/deploy"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# Collected when the module is imported: with no module yet, the per-module test below is not
# generated at all; it switches itself on with the first plugins/modules/*.py.
MODULES = sorted(
    path.stem for path in (ROOT / "plugins" / "modules").glob("*.py") if path.stem != "__init__"
)


def _run(
    argv: Sequence[str | Path], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run argv, failing the test with its output when it exits non-zero."""
    proc = subprocess.run(
        [str(arg) for arg in argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, argv))} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def _ansible_env(home: Path, **extra: str) -> dict[str, str]:
    """Environment free of the caller's ansible/venv settings; ansible state kept under home."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ANSIBLE_") and key not in {"PYTHONPATH", "VIRTUAL_ENV"}
    }
    home.mkdir(parents=True, exist_ok=True)
    env["ANSIBLE_HOME"] = str(home)
    env["ANSIBLE_LOCAL_TEMP"] = str(home / "tmp")
    env.update(extra)
    return env


def _listed(collections_json: str, collections_dir: Path) -> Mapping[str, object] | None:
    """The entry for leaseguard.deploy that `collection list --format json` shows under dir."""
    listing: dict[str, dict[str, Mapping[str, object]]] = json.loads(collections_json)
    for path, collections in listing.items():
        if Path(path).resolve() == collections_dir.resolve():
            return collections.get(COLLECTION)
    return None


def _tool(name: str) -> str:
    """An ansible command-line tool from the environment running the tests."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is neither beside {sys.executable} nor on PATH")
    return found


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tracked and untracked-but-not-ignored files, as a fresh clone has them."""
    dest = tmp_path_factory.mktemp("source")
    listed = _run(
        ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    ).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


@pytest.fixture(scope="module")
def wheel(source_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The leaseguard wheel built from source_tree."""
    outdir = tmp_path_factory.mktemp("dist")
    # Without hatchling here, build fetches it into an isolated env (PyPI is reachable in CI).
    isolation = ["--no-isolation"] if importlib.util.find_spec("hatchling") else []
    _run([sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", outdir, source_tree])
    (built,) = outdir.glob("leaseguard-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the running ansible-core version and the wheel (no other deps)."""
    path = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", path])
    python = path / "bin" / "python"
    # The same ansible-core as the test environment, so pip takes it from its cache.
    ansible_core = f"ansible-core=={importlib.metadata.version('ansible-core')}"
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", python, "install", "-q"]
    _run([*pip, ansible_core])
    _run([*pip, "--no-deps", wheel])
    return path


@pytest.fixture(scope="module")
def venv_site_packages(venv: Path) -> Path:
    """The venv's purelib directory, where the wheel put ansible_collections/."""
    script = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([venv / "bin" / "python", "-c", script]).stdout.strip())


@pytest.fixture(scope="module")
def venv_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for the venv's tools: no ansible.cfg, no collections path, own ANSIBLE_HOME."""
    home = tmp_path_factory.mktemp("ansible-home")
    empty_cfg = home / "ansible.cfg"
    empty_cfg.write_text("")
    return _ansible_env(home, ANSIBLE_CONFIG=str(empty_cfg))


@pytest.fixture(scope="module")
def doc_listing(venv: Path, venv_env: dict[str, str]) -> dict[str, str]:
    """`ansible-doc -l leaseguard.deploy --json` as run by the wheel venv."""
    argv: list[str | Path] = [
        venv / "bin" / "ansible-doc",
        "-t",
        "module",
        "-l",
        COLLECTION,
        "--json",
    ]
    listing: dict[str, str] = json.loads(_run(argv, env=venv_env, cwd=venv).stdout)
    return listing


def test_galaxy_yml_version_matches_pyproject() -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert f"{galaxy['namespace']}.{galaxy['name']}" == COLLECTION
    assert galaxy["version"] == VERSION


@pytest.mark.integration
@pytest.mark.slow
def test_wheel_ships_the_galaxy_build_of_the_collection_and_nothing_from_the_dev_tree(
    wheel: Path, galaxy_tarball: Path
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    allowed = ("leaseguard/", f"{COLLECTION_DIR}/", f"leaseguard-{VERSION}.dist-info/")
    assert [name for name in names if not name.startswith(allowed)] == []
    assert [name for name in names if "tests" in name.split("/")[:-1]] == []
    manifest = json.loads(zipfile.Path(wheel, f"{COLLECTION_DIR}/MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == VERSION
    # The very files, manifests included, that Galaxy users get from the tarball.
    with tarfile.open(galaxy_tarball) as tarball:
        in_tarball = {m.name: tarball.extractfile(m).read() for m in tarball if m.isfile()}  # type: ignore[union-attr]
    in_wheel = {
        name.removeprefix(f"{COLLECTION_DIR}/"): zipfile.Path(wheel, name).read_bytes()
        for name in names
        if name.startswith(f"{COLLECTION_DIR}/")
    }
    assert in_wheel == in_tarball
    for shipped in ("LICENSE", "requirements.txt", "bindep.txt", "meta/execution-environment.yml"):
        assert shipped in in_wheel


def _requirements_txt() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [req for req in (line.split("#")[0].strip() for line in lines) if req]


def test_requirements_txt_names_the_cores_requirements_and_fabric_from_the_public_index() -> None:
    # The core travels in the collection; no leaseguard release needs to be on any index.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _requirements_txt() == [*pyproject["dependencies"], "fabric>=3.2"]
    assert "fabric>=3.2" in pyproject["optional-dependencies"]["ansible"]


def _ansible_core_range(requirements: Sequence[str]) -> SpecifierSet:
    (found,) = [Requirement(r) for r in requirements if Requirement(r).name == "ansible-core"]
    return found.specifier


def test_every_ansible_core_range_admits_the_same_releases_as_requires_ansible() -> None:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    admitted = SpecifierSet(runtime["requires_ansible"])
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert _ansible_core_range(pyproject["project"]["optional-dependencies"]["ansible"]) == admitted
    assert _ansible_core_range(pyproject["build-system"]["requires"]) == admitted
    # No cap that excludes a current release: installing the extra never downgrades.
    assert importlib.metadata.version("ansible-core") in admitted
    assert {"2.21.5", "3.0.0"} <= set(admitted.filter(["2.16.0", "2.21.5", "3.0.0"]))


def test_there_is_a_sanity_ignore_file_for_every_admitted_minor_release() -> None:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    admitted = SpecifierSet(runtime["requires_ansible"])
    ignores = list((ROOT / "tests" / "sanity").glob("ignore-*.txt"))
    minors = sorted(int(path.stem.split(".")[1]) for path in ignores)
    # From the oldest admitted minor, none missing, up to at least the newest released one.
    assert "2.16.99" not in admitted and "2.17.0" in admitted
    assert minors == list(range(17, minors[-1] + 1)) and minors[-1] >= 21
    # The same findings on every release so far: a file that differs says why in its lines.
    assert len({path.read_text() for path in ignores}) == 1


@pytest.mark.integration
@pytest.mark.slow
def test_pip_installed_wheel_is_listed_by_ansible_galaxy(
    venv: Path, venv_site_packages: Path, venv_env: dict[str, str]
) -> None:
    assert (venv_site_packages / COLLECTION_DIR / "MANIFEST.json").is_file()
    argv: list[str | Path] = [
        venv / "bin" / "ansible-galaxy",
        "collection",
        "list",
        "--format",
        "json",
    ]
    listed = _run(argv, env=venv_env, cwd=venv).stdout
    entry = _listed(listed, venv_site_packages / "ansible_collections")
    assert entry == {"version": VERSION}, listed


if MODULES:

    @pytest.mark.integration
    @pytest.mark.slow
    @pytest.mark.parametrize("module", MODULES)
    def test_pip_installed_wheel_documents_module(module: str, doc_listing: dict[str, str]) -> None:
        assert f"{COLLECTION}.{module}" in doc_listing, sorted(doc_listing)


@pytest.mark.integration
def test_in_tree_link_is_listed_with_the_repository_ansible_cfg(tmp_path: Path) -> None:
    link_script = ROOT / "scripts" / "collection-link.sh"
    _run([link_script])
    assert _run([link_script]).stdout == "", "collection-link.sh is not silent when the link exists"
    link = ROOT / "build" / "collections" / COLLECTION_DIR
    assert link.is_symlink()
    # A link to the repository's own root must never be tracked: tree walkers would loop.
    _run(["git", "-C", ROOT, "check-ignore", "--quiet", link.relative_to(ROOT)])
    assert not Path(os.readlink(link)).is_absolute()
    assert link.resolve() == ROOT

    env = _ansible_env(tmp_path / "ansible-home", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    argv = [_tool("ansible-galaxy"), "collection", "list", "--format", "json"]
    listed = _run(argv, env=env, cwd=tmp_path).stdout
    entry = _listed(listed, ROOT / "build" / "collections" / "ansible_collections")
    assert entry == {"version": VERSION}, listed


# -- the Galaxy path: tarball + requirements.txt into a plain ansible-core venv ---------------

LIVE_CLAIM_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: guard
      leaseguard.deploy.lease_guard:
        db_host: "{{ db_host }}"
        db_port: "{{ db_port }}"
        db_name: "{{ db_name }}"
        db_user: "{{ db_user }}"
        tunnel: false
        task_timeout_s: 3600
        runtime_started_at: "{{ started }}"
      register: guard
    - name: report
      ansible.builtin.debug:
        msg: "decision={{ guard.decision }}"
"""


def _galaxy_build(source: Path, outdir: Path, env: dict[str, str]) -> Path:
    """A plain `ansible-galaxy collection build` of source (galaxy.yml's build_ignore only)."""
    argv = [_tool("ansible-galaxy"), "collection", "build", source, "--output-path", outdir]
    _run(argv, env=env, cwd=outdir)
    (tarball,) = outdir.glob("leaseguard-deploy-*.tar.gz")
    return tarball


def _release_build(source: Path, outdir: Path) -> Path:
    """The release tarball, as `make collection` builds it: source's build_collection.py."""
    script = source / "scripts" / "build_collection.py"
    built = _run([sys.executable, script, "--output-path", outdir], env=_ansible_env(outdir / "h"))
    return Path(built.stdout.strip())


def _members(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as archive:
        return archive.getnames()


@pytest.fixture(scope="module")
def galaxy_tarball(source_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release tarball built from the fresh-clone copy."""
    return _release_build(source_tree, tmp_path_factory.mktemp("galaxy"))


# What a collection artifact holds at its top level; everything else in the repository is the
# Python distribution, its tests or developer tooling.
COLLECTION_TOP = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.md"}
COLLECTION_TOP |= {"requirements.txt", "bindep.txt", "changelogs", "meta", "plugins", "roles"}
COLLECTION_TOP |= {"playbooks"}
# What tools and runs leave in a work tree (ansible-lint's .ansible/ first of all).
LEFT_BEHIND = (
    ".ansible/collections/ansible_collections/ns/name/galaxy.yml",
    ".venv/bin/python3",
    "build/collections/x.yml",
    "dist/leaseguard-deploy-0.0.1.tar.gz",
    "tests/output/.tmp/x.txt",
    ".pytest_cache/v/cache/nodeids",
    "plugins/action/__pycache__/lease_guard.cpython-311.pyc",
    "changelogs/.plugin-cache.yaml",
)


@pytest.mark.integration
def test_the_build_leaves_out_what_tools_leave_behind(source_tree: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(source_tree, clone)
    _run(["git", "init", "-q", clone])
    _run(["git", "-C", clone, "add", "-A"])
    for name in LEFT_BEHIND:
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text("left behind\n")
    (tmp_path / "plain").mkdir()
    plain = _galaxy_build(clone, tmp_path / "plain", _isolated_env(tmp_path / "home"))
    release = _release_build(clone, tmp_path / "release")
    for tarball in (plain, release):
        names = _members(tarball)
        assert {name.split("/")[0] for name in names} == COLLECTION_TOP, tarball
        assert [name for name in names if "__pycache__" in name or ".plugin-cache" in name] == []
    # Only the release build carries the core, and only the layers the plugins import.
    vendored = {n.split("/")[4] for n in _members(release) if n.count("/") >= 4 and "_vendor" in n}
    assert vendored == {"__init__.py", "api.py", "core", "adapters", "orchestration"}
    assert [name for name in _members(plain) if "_vendor" in name] == []


@pytest.fixture(scope="module")
def galaxy_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (with its own pip) holding only the running ansible-core version."""
    path = tmp_path_factory.mktemp("galaxy-venv")
    _run([sys.executable, "-m", "venv", path])
    ansible_core = f"ansible-core=={importlib.metadata.version('ansible-core')}"
    _run([path / "bin" / "pip", "install", "-q", ansible_core])
    return path


def _galaxy(venv: Path, env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The venv's ansible-galaxy; fails the test on a non-zero exit."""
    return _run([venv / "bin" / "ansible-galaxy", *args], env=env, cwd=venv)


def _galaxy_result(
    venv: Path, env: dict[str, str], *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """ansible-galaxy without failing the test on a non-zero exit."""
    argv = [str(a) for a in [venv / "bin" / "ansible-galaxy", *args]]
    return subprocess.run(argv, env=env, cwd=venv, capture_output=True, text=True, check=False)


def _verify_offline(venv: Path, env: dict[str, str], collections_dir: Path) -> str:
    """`collection verify --offline` of the copy under collections_dir; fails on any change."""
    out = _galaxy(venv, env, "collection", "verify", "--offline", COLLECTION, "-p", collections_dir)
    assert f"Installed collection found at '{collections_dir}" in out.stdout, out.stdout
    assert "Successfully verified" in out.stdout, out.stdout
    return out.stdout


def _play(
    venv: Path, env: dict[str, str], workdir: Path, **extra_vars: str
) -> subprocess.CompletedProcess[str]:
    play = workdir / "play.yml"
    play.write_text(LIVE_CLAIM_PLAY)
    argv = [venv / "bin" / "ansible-playbook", "-i", "localhost,", "-c", "local", play]
    argv += [
        "-e",
        json.dumps({"ansible_python_interpreter": str(venv / "bin" / "python"), **extra_vars}),
    ]
    return subprocess.run(
        [str(a) for a in argv], env=env, cwd=workdir, capture_output=True, text=True, timeout=300
    )


def _play_vars(db: PgDatabase) -> dict[str, str]:
    """LIVE_CLAIM_PLAY's variables: the database, and a runtime started an hour ago."""
    return {
        "db_host": db.cluster.host,
        "db_port": str(db.cluster.port),
        "db_name": db.name,
        "db_user": SUPERUSER,
        "started": (datetime.now(UTC) - timedelta(hours=1)).isoformat(),
    }


def _isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """_ansible_env with an empty ansible.cfg of its own under home."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "ansible.cfg").write_text("")
    return _ansible_env(home, ANSIBLE_CONFIG=str(home / "ansible.cfg"), **extra)


@pytest.fixture
def live_claim_db(db: PgDatabase) -> PgDatabase:
    """A database whose execution_runs has one claim renewed ten minutes ago."""
    ten_min_ago = datetime.now(UTC) - timedelta(minutes=10)
    with db.connect(socket=True) as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", ten_min_ago, ten_min_ago)])
    return db


@pytest.mark.integration
@pytest.mark.slow
def test_galaxy_tarball_and_its_requirements_from_the_public_index_are_a_complete_install(
    galaxy_tarball: Path,
    galaxy_venv: Path,
    live_claim_db: PgDatabase,
    tmp_path: Path,
) -> None:
    env = _isolated_env(tmp_path / "home", ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    collections = tmp_path / "collections"
    _galaxy(galaxy_venv, env, "collection", "install", galaxy_tarball, "-p", collections)
    installed = collections / COLLECTION_DIR
    _verify_offline(galaxy_venv, env, collections)
    doc = [galaxy_venv / "bin" / "ansible-doc", f"{COLLECTION}.lease_guard"]
    assert "db_password" in _run(doc, env=env, cwd=tmp_path).stdout
    facts = _play_vars(live_claim_db)

    # A plain ansible-core venv: the modules cannot run, and say what to install.
    bare = _play(galaxy_venv, env, tmp_path, **facts)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert "the Python requirements of leaseguard.deploy are required" in bare.stdout
    assert f"pip install -r {installed}/requirements.txt" in bare.stdout, bare.stdout
    assert str(galaxy_venv / "bin" / "python") in bare.stdout

    # What the message says, from the public index: no leaseguard package is installed, the
    # collection runs the core it carries.
    _run([galaxy_venv / "bin" / "pip", "install", "-q", "-r", installed / "requirements.txt"])
    no_package = "import importlib.util as u; assert u.find_spec('leaseguard') is None"
    _run([galaxy_venv / "bin" / "python", "-c", no_package])
    ready = _play(galaxy_venv, env, tmp_path, **facts)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "decision=defer" in ready.stdout, ready.stdout
    assert "WARNING" not in ready.stdout + ready.stderr
    _verify_offline(galaxy_venv, env, collections)


@pytest.mark.integration
@pytest.mark.slow
def test_the_wheel_and_the_galaxy_copy_of_one_release_run_silently_and_both_verify(
    galaxy_tarball: Path,
    galaxy_venv: Path,
    wheel: Path,
    live_claim_db: PgDatabase,
    tmp_path: Path,
) -> None:
    env = _isolated_env(tmp_path / "home", ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    collections = tmp_path / "collections"
    pip = [galaxy_venv / "bin" / "pip", "install", "-q", "--find-links", wheel.parent]
    _run([*pip, f"leaseguard[ansible]=={VERSION}"])
    _galaxy(galaxy_venv, env, "collection", "install", "--force", galaxy_tarball, "-p", collections)
    ready = _play(galaxy_venv, env, tmp_path, **_play_vars(live_claim_db))
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "decision=defer" in ready.stdout, ready.stdout
    # Same release from both installs: ansible runs the Galaxy copy, silently and rightly.
    assert "two different copies" not in ready.stdout + ready.stderr
    assert "different releases" not in ready.stdout + ready.stderr

    # Both copies verify against their own manifests (the play ran plugins from the Galaxy one).
    _verify_offline(galaxy_venv, env, collections)
    script = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([galaxy_venv / "bin" / "python", "-c", script]).stdout.strip())
    _verify_wheel_copy(galaxy_venv, env, site)


def _verify_wheel_copy(venv: Path, env: dict[str, str], site: Path) -> None:
    """The wheel's copy verifies, once pip's bytecode folders are out of the way.

    pip byte-compiles every .py it installs; ansible-core (2.19) skips *.pyc in verify but
    reports their __pycache__ folders as new content (ansible/ansible#81628), as the README
    says. Anything else reported is a real difference.
    """
    argv = ["collection", "verify", "--offline", COLLECTION, "-p", site]
    proc = _galaxy_result(venv, env, *argv)
    reported = [line.strip() for line in proc.stdout.splitlines() if line.startswith("    ")]
    assert [name for name in reported if not name.endswith("__pycache__")] == [], proc.stdout
    copy = site / COLLECTION_DIR
    for cache in list(copy.rglob("__pycache__")):
        shutil.rmtree(cache)
    _verify_offline(venv, env, site)
    # A changed file is caught (the check can fail).
    tasks = copy / "roles" / "restart" / "tasks" / "main.yml"
    original = tasks.read_text()
    tasks.write_text(original + "# changed\n")
    try:
        changed = _galaxy_result(venv, env, *argv)
        assert changed.returncode != 0 and "roles/restart/tasks/main.yml" in changed.stdout
    finally:
        tasks.write_text(original)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "warning"),
    [
        ("content", "two different copies of leaseguard.deploy"),
        ("version", "the plugins and the core they call come from different releases"),
    ],
)
def test_a_galaxy_copy_that_differs_from_the_wheels_is_named_in_a_warning(
    change: str,
    warning: str,
    source_tree: Path,
    galaxy_venv: Path,
    wheel: Path,
    live_claim_db: PgDatabase,
    tmp_path: Path,
) -> None:
    changed = tmp_path / "source"
    shutil.copytree(source_tree, changed)
    if change == "content":
        with (changed / "README.md").open("a") as readme:
            readme.write("\nA local edit.\n")
    else:
        galaxy_yml = changed / "galaxy.yml"
        galaxy_yml.write_text(
            galaxy_yml.read_text().replace(f"version: {VERSION}", "version: 9.9.9")
        )
    env = _isolated_env(tmp_path / "home", ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    tarball = _release_build(changed, tmp_path / "dist")
    pip = [galaxy_venv / "bin" / "pip", "install", "-q", "--find-links", wheel.parent]
    _run([*pip, f"leaseguard[ansible]=={VERSION}"])
    # With the wheel's copy of the same version in site-packages, ansible-galaxy says
    # "Nothing to do" unless forced: the user who installs over it means to.
    install = ["collection", "install", "--force", tarball, "-p", tmp_path / "collections"]
    _galaxy(galaxy_venv, env, *install)

    facts = _play_vars(live_claim_db)
    run = _play(galaxy_venv, env, tmp_path, **facts)
    output = " ".join((run.stdout + run.stderr).split())  # warnings are wrapped
    assert warning in output, output
    assert str(tmp_path / "collections" / COLLECTION_DIR) in output
    assert "decision=defer" in run.stdout  # a warning, not a failure


EE_DEFINITION = """
version: 3
images:
  base_image:
    name: quay.io/ansible/awx-ee:latest
additional_build_files:
  - src: {tarball}
    dest: collections
dependencies:
  galaxy:
    collections:
      - name: collections/{tarball_name}
        type: file
"""


@pytest.mark.integration
@pytest.mark.slow
def test_ansible_builder_context_installs_the_collection_and_its_requirements(
    galaxy_tarball: Path, tmp_path: Path
) -> None:
    """`ansible-builder create`, then its galaxy and introspection stages run here.

    No image can be built on these machines (no registry for the base image), so the two
    stages that read the collection are replayed with the context's own files and scripts:
    the galaxy stage installs requirements.yml from _build/, the builder stage runs the
    generated introspect.py over the installed collections.
    """
    ee_file = tmp_path / "execution-environment.yml"
    ee_file.write_text(
        EE_DEFINITION.format(tarball=galaxy_tarball, tarball_name=galaxy_tarball.name)
    )
    context = tmp_path / "context"
    _run([_tool("ansible-builder"), "create", "-f", ee_file, "-c", context], cwd=tmp_path)
    build = context / "_build"
    assert (build / "collections" / galaxy_tarball.name).is_file()

    env = _isolated_env(tmp_path / "home")
    installed = tmp_path / "usr-share-ansible-collections"
    galaxy = [_tool("ansible-galaxy"), "collection", "install", "-r", "requirements.yml"]
    _run([*galaxy, "--collections-path", installed], env=env, cwd=build)

    pip_out, bindep_out = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    introspect = [sys.executable, build / "scripts" / "introspect.py", "introspect"]
    _run([*introspect, f"--write-pip={pip_out}", f"--write-bindep={bindep_out}", installed])
    # ansible-builder leaves out what every EE already has (PyYAML, with ansible-core).
    assert {"psycopg[binary]>=3.1", "fabric>=3.2"} <= set(pip_out.read_text().split())
    bindep = bindep_out.read_text()
    assert "openssh-client [platform:dpkg]" in bindep
    assert "openssh-clients [platform:rpm]" in bindep


# --- extras: the base install is the core and the CLI ------------------------------------------


@pytest.fixture(scope="module")
def cli_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and only the base requirements: psycopg and PyYAML."""
    path = tmp_path_factory.mktemp("cli-venv")
    _run([sys.executable, "-m", "venv", "--without-pip", path])
    # The versions of the test environment, so pip takes them from its cache / local index.
    base = [f"{name}=={importlib.metadata.version(name)}" for name in ("psycopg", "PyYAML")]
    binary = f"psycopg-binary=={importlib.metadata.version('psycopg-binary')}"
    pip = [sys.executable, "-m", "pip", "--python", path / "bin" / "python", "install", "-q"]
    _run([*pip, *base, binary])
    _run([*pip, "--no-deps", wheel])
    return path


@pytest.mark.integration
@pytest.mark.slow
def test_the_base_install_runs_the_cli_without_any_extra(cli_venv: Path) -> None:
    python = cli_venv / "bin" / "python"
    for absent in ("fabric", "paramiko", "invoke", "ansible", "jinja2"):
        assert importlib.util.find_spec(absent) is not None  # the test env has them all ...
        script = f"import importlib.util as u; assert u.find_spec({absent!r}) is None"
        _run([python, "-c", script])  # ... the base install none
    done = _run([cli_venv / "bin" / "leaseguard", "check", "--help"])
    assert "--runtime-started-at" in done.stdout
    _run([python, "-c", "import leaseguard.cli, leaseguard.orchestration.session"])


@pytest.mark.integration
@pytest.mark.slow
def test_a_front_whose_extra_is_missing_names_the_extra(cli_venv: Path) -> None:
    python = cli_venv / "bin" / "python"
    for module, extra in (
        ("leaseguard.fabric.tasks", "leaseguard[fabric]"),
        ("leaseguard.orchestration.ssh_session", "leaseguard[fabric]"),
    ):
        done = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 1
        assert f"pip install '{extra}'" in done.stderr, done.stderr


# --- Galaxy's own import checks ---------------------------------------------------------------

GALAXY_IMPORTER_CFG = """
[galaxy-importer]
# The checks Galaxy runs on upload, locally: ansible-doc and ansible-lint from the tools' venv,
# without ansible-test's container (these machines have no registry to pull it from;
# scripts/ansible-test-sanity.sh runs the sanity tests).
run_ansible_test = False
run_ansible_doc = True
run_ansible_lint = True
check_changelog = True
"""


@pytest.mark.integration
@pytest.mark.slow
def test_galaxy_importer_accepts_the_release_tarball(galaxy_tarball: Path, tmp_path: Path) -> None:
    tools = collection_tools()
    config = tmp_path / "galaxy-importer.cfg"
    config.write_text(GALAXY_IMPORTER_CFG)
    env = _ansible_env(
        tmp_path / "home",
        PATH=f"{tools}{os.pathsep}{os.environ['PATH']}",
        GALAXY_IMPORTER_CONFIG=str(config),
        GALAXY_IMPORTER_ANSIBLE_LOCAL_TMP=str(tmp_path / "tmp"),
    )
    # It writes importer_result.json into the current directory.
    importer = [tools / "python", "-m", "galaxy_importer.main", galaxy_tarball]
    done = _run(importer, env=env, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert "Importer processing completed successfully" in output, output
    assert "Linting collection via ansible-lint" in output and "Getting doc strings" in output
    assert [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))] == []


def test_make_sanity_runs_the_oldest_and_the_newest_admitted_release() -> None:
    lines = (ROOT / "Makefile").read_text().splitlines()
    (line,) = [line for line in lines if line.startswith("SANITY_ANSIBLE_CORE ?=")]
    releases = line.partition("?=")[2].split()
    ignores = sorted(int(p.stem.split(".")[1]) for p in (ROOT / "tests/sanity").glob("ignore-*"))
    # The oldest admitted (the ignore-file test ties it to requires_ansible), then the newest
    # final release (2.21 when written; ignore-2.22.txt waits for 2.22).
    assert releases == [f"2.{ignores[0]}", "2.21"]


def test_the_plugins_import_only_the_layers_the_tarball_carries() -> None:
    """A plugin importing the CLI or Fabric front would fail where only the carried core is."""
    spec = importlib.util.spec_from_file_location("bc", ROOT / "scripts" / "build_collection.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    carried = {part.removesuffix(".py") for part in builder.CORE_PARTS}
    imported = set()
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            imported |= {name for name in names if name.split(".")[0] == "leaseguard"}
    assert imported, "the plugins import the core"
    assert {name.split(".")[1] for name in imported} <= carried, sorted(imported)
