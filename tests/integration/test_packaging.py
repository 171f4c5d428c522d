"""The collection leaseguard.deploy is visible to ansible from the wheel and from the work tree.

The wheel is built from a copy of the files git knows about (what a fresh clone in CI has),
installed with `--no-deps` into a fresh venv next to ansible-core, and inspected with that
venv's own ansible-galaxy/ansible-doc: a plain `pip install leaseguard` must be enough.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

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
def test_wheel_ships_the_collection_metadata_and_nothing_from_the_dev_tree(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert f"{COLLECTION_DIR}/galaxy.yml" in names
    assert f"{COLLECTION_DIR}/meta/runtime.yml" in names
    allowed = ("leaseguard/", f"{COLLECTION_DIR}/", f"leaseguard-{VERSION}.dist-info/")
    assert [name for name in names if not name.startswith(allowed)] == []
    assert [name for name in names if "tests" in name.split("/")[:-1]] == []
    shipped_galaxy = yaml.safe_load(zipfile.Path(wheel, f"{COLLECTION_DIR}/galaxy.yml").read_text())
    assert shipped_galaxy["version"] == VERSION


@pytest.mark.integration
@pytest.mark.slow
def test_pip_installed_wheel_is_listed_by_ansible_galaxy(
    venv: Path, venv_site_packages: Path, venv_env: dict[str, str]
) -> None:
    assert (venv_site_packages / COLLECTION_DIR / "galaxy.yml").is_file()
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
