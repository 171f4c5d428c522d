#!/usr/bin/env bash
# Run `ansible-test sanity` on the collection leaseguard.deploy without docker.
#
# ansible-test resolves the physical working directory and insists on
# .../ansible_collections/<namespace>/<name>, so a link to the repository does not do: copy the
# files git knows about (tracked, plus untracked-but-not-ignored) into a temporary
# ansible_collections/leaseguard/deploy and run it there.
#
# By default only the collection's own content is copied (what the artifact and the wheel ship,
# plus tests/sanity): ansible-test would otherwise also run compile, pep8, pylint (with its
# collection rules, e.g. no `_` variable, `check=` on subprocess.run), yamllint, shellcheck and
# the text checks over src/, tests/, benchmarks/ and scripts/, which ruff, mypy and pytest
# already cover with the project's own rules. SANITY_SCOPE=repo copies everything instead.
#
# ansible-test bootstraps pip in each sanity venv with a get-pip script downloaded from a host
# that these machines cannot reach; it first looks in ~/.ansible/test/cache/get_pip_<ver>.py,
# so a stand-in there installs the same pip version from a wheel fetched from PyPI.
#
# Environment:
#   ANSIBLE_CORE   ansible-core minor releases to run on, each from its own venv under
#                  build/sanity/ (e.g. "2.17 2.21": `make sanity` runs the oldest and the newest
#                  that meta/runtime.yml admits); a release that needs a newer Python than this
#                  machine has (2.20 and later need 3.12) is skipped, saying so. Unset: the
#                  ansible-core of $PYTHON.
#   ANSIBLE_TEST   ansible-test to run (default: next to $PYTHON, else from PATH)
#   PYTHON         Python whose ansible-core provides ansible-test (default: python3)
#   SANITY_PYTHON  --python version for the sanity tests (default: 3.11; with ANSIBLE_CORE,
#                  the venv's)
#   SANITY_SCOPE   collection (default) or repo: which of git's files to copy (see above)
#   KEEP_TMP=1     keep the temporary copy and print where it is
# Extra arguments go to `ansible-test sanity` (e.g. --test pylint, -v).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"

# --- one venv per ansible-core release --------------------------------------------------------
# The first Python here at least as new as $1 (3.12 -> python3.12, python3.13 or a pyenv one).
python_at_least() {
    local want_minor="${1#3.}" candidate
    for candidate in python3 python3.{11..14} "$HOME"/.pyenv/versions/3.*/bin/python3; do
        candidate="$(command -v "$candidate" 2>/dev/null)" || continue
        # A pyenv shim of a version that is not active fails here: try the next one.
        "$candidate" -c "import sys; sys.exit(sys.version_info[:2] < (3, $want_minor))" \
            2>/dev/null && {
            echo "$candidate"
            return 0
        }
    done
    return 1
}

if [[ -n "${ANSIBLE_CORE:-}" ]]; then
    for release in $ANSIBLE_CORE; do
        # ansible-core 2.20 dropped Python 3.11 on the controller.
        needs=3.11
        [[ "${release#2.}" -ge 20 ]] && needs=3.12
        base="$(python_at_least "$needs")" || {
            echo "ansible-test-sanity: SKIPPED ansible-core $release: it needs Python $needs or" \
                "newer on the controller, and this machine has none (2.19 is the newest for" \
                "Python 3.11: make sanity SANITY_ANSIBLE_CORE='2.17 2.19')" >&2
            continue
        }
        venv="$root/build/sanity/ansible-core-$release"
        if ! "$venv/bin/python" -c "import ansible.release as r, sys
sys.exit(not r.__version__.startswith('$release.'))" 2>/dev/null; then
            rm -rf "$venv"
            "$base" -m venv "$venv"
            "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
                "ansible-core==$release.*"
        fi
        version="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        echo "ansible-test-sanity: ansible-core $release on Python $version" >&2
        # ansible-test looks its --python up on PATH: the venv's bin has it.
        PATH="$venv/bin:$PATH" ANSIBLE_CORE="" ANSIBLE_TEST="" PYTHON="$venv/bin/python" \
            SANITY_PYTHON="$version" bash "$0" "$@"
    done
    exit 0
fi
python="${PYTHON:-python3}"
sanity_python="${SANITY_PYTHON:-3.11}"
scope="${SANITY_SCOPE:-collection}"
case "$scope" in
    collection | repo) ;;
    *)
        echo "ansible-test-sanity: SANITY_SCOPE must be collection or repo, not $scope" >&2
        exit 2
        ;;
esac

# Paths (relative to the root) that belong to the collection leaseguard.deploy.
in_scope() {
    [[ "$scope" == repo ]] && return 0
    case "$1" in
        galaxy.yml | README.md | LICENSE* | COPYING | CHANGELOG* | changelogs/*) return 0 ;;
        meta/* | plugins/* | roles/* | playbooks/* | tests/sanity/* | tests/config.yml) return 0 ;;
    esac
    return 1
}

python_bin="$(command -v "$python")" || {
    echo "ansible-test-sanity: no Python at PYTHON=$python" >&2
    exit 1
}
if [[ -n "${ANSIBLE_TEST:-}" ]]; then
    ansible_test="$ANSIBLE_TEST"
elif [[ -x "$(dirname "$python_bin")/ansible-test" ]]; then
    ansible_test="$(dirname "$python_bin")/ansible-test"
else
    ansible_test="$(command -v ansible-test)" || {
        echo "ansible-test-sanity: no ansible-test beside $python_bin nor on PATH" >&2
        exit 1
    }
fi
# The interpreter in ansible-test's shebang is the one whose ansible_test package is read below.
read -r -a shebang < <(head -n1 "$ansible_test" | sed -e 's/^#!//')
if [[ "$(basename "${shebang[0]}")" == env ]]; then
    ansible_test_python="${shebang[1]}"
else
    ansible_test_python="${shebang[0]}"
fi

# --- get-pip stand-in -----------------------------------------------------------------------
# Ask ansible-test itself which pip it bootstraps for that Python (24.2 for ansible-core 2.19).
pip_version="$("$ansible_test_python" -c '
import sys, types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version=sys.argv[1]))["pip"])
' "$sanity_python")"
cache_dir="$HOME/.ansible/test/cache"
get_pip="$cache_dir/get_pip_${pip_version//./_}.py"
wheel_dir="$cache_dir/pip-$pip_version"

if ! compgen -G "$wheel_dir/pip-$pip_version-*.whl" >/dev/null; then
    mkdir -p "$wheel_dir"
    "$ansible_test_python" -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$wheel_dir" "pip==$pip_version"
fi
if [[ ! -f "$get_pip" ]]; then
    mkdir -p "$cache_dir"
    cat >"$get_pip.tmp" <<'EOF'
"""Stand-in for get-pip.py: install pip from the wheel stored beside this script.

Written by leaseguard's scripts/ansible-test-sanity.sh because ansible-test's own download
host is unreachable here. ansible-test calls it as `get-pip.py pip==<ver> [--no-setuptools]
[--no-wheel] [pip options]`.
"""

import glob
import os
import sys

VERSION = "@VERSION@"
HERE = os.path.dirname(os.path.abspath(__file__))
WHEEL = glob.glob(os.path.join(HERE, "pip-" + VERSION, "pip-" + VERSION + "-*.whl"))[0]
DROP = ("--no-setuptools", "--no-wheel")

sys.path.insert(0, WHEEL)
from pip._internal.cli.main import main  # noqa: E402

args = [a for a in sys.argv[1:] if a not in DROP and not a.startswith("pip==")]
sys.exit(main(["install", "--upgrade", "--force-reinstall", WHEEL, *args]))
EOF
    sed -i "s/@VERSION@/$pip_version/" "$get_pip.tmp"
    mv "$get_pip.tmp" "$get_pip"
fi

# --- copy of the collection ------------------------------------------------------------------
tmp="$(mktemp -d "${TMPDIR:-/tmp}/leaseguard-sanity.XXXXXX")"
if [[ "${KEEP_TMP:-0}" == 1 ]]; then
    echo "ansible-test-sanity: keeping $tmp" >&2
else
    trap 'rm -rf "$tmp"' EXIT
fi
dest="$tmp/ansible_collections/leaseguard/deploy"
mkdir -p "$dest"

# Files deleted in the working tree are still in the index: copy only what exists.
git -C "$root" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' path; do
        if in_scope "$path" && [[ -e "$root/$path" || -L "$root/$path" ]]; then
            printf '%s\0' "$path"
        fi
    done |
    (cd "$root" && xargs -0 --no-run-if-empty cp -P --parents -t "$dest")

# No `git init` in the copy: without a .git directory ansible-test walks the tree, which holds
# exactly the files git listed above.

cd "$dest"
echo "ansible-test-sanity: $(find . -type f | wc -l) files ($scope scope), $ansible_test" >&2
"$ansible_test" sanity --python "$sanity_python" --color no "$@"
