#!/usr/bin/env bash
# Idempotent set-up of a Debian 12 machine for leaseguard development and CI:
#   1. the Debian packages the test suite drives (installs only the missing ones);
#   2. the project venv .venv with `pip install -e '.[test]'` (skipped while pyproject.toml is
#      unchanged since the last successful install: a stamp inside .venv records its hash).
# Prints one line per step; the apt/pip output goes to a log that is shown only on failure.
# Environment: PYTHON (interpreter for the venv, default python3), VENV (default .venv).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$root"

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
STAMP="$VENV/.bootstrap-stamp"
APT_PACKAGES=(
    postgresql-15 postgresql-client-15 postgresql-15-cron
    openssh-server podman runc iproute2 busybox-static make
    pgbouncer  # the transaction-pooler tests (sandbox/pgbouncer.py)
    debootstrap  # the systemd test host's root file system (tests/support/systemd_host.py)
)

say() { printf 'bootstrap: %s\n' "$*"; }

if [[ "$(id -u)" -eq 0 ]]; then
    as_root=()
else
    as_root=(sudo)
fi

# Runs a command with its output in a temp log; on failure shows the log's tail and exits.
quietly() {
    local log rc=0
    log="$(mktemp)"
    "$@" >"$log" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
        say "FAILED ($rc): $*"
        tail -n 40 "$log" >&2
        rm -f "$log"
        exit "$rc"
    fi
    rm -f "$log"
}

# apt-get that waits for another apt/dpkg run (e.g. unattended-upgrades) instead of failing:
# dpkg's frontend lock has a built-in timeout, the lists lock of `update` gets a retry loop.
apt_get() {
    local attempt out rc
    for attempt in $(seq 1 60); do
        rc=0
        out="$("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq \
            -o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0 "$@" 2>&1)" || rc=$?
        if [[ $rc -eq 0 ]]; then
            return 0
        fi
        if [[ "$out" != *"Could not get lock"* && "$out" != *"Unable to lock"* ]]; then
            printf '%s\n' "$out" | tail -n 40 >&2
            return "$rc"
        fi
        [[ $attempt -eq 1 ]] && say "apt is busy (another apt/dpkg run holds its lock); waiting"
        sleep 10
    done
    say "gave up waiting for the apt lock"
    return 1
}

is_installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

# --- 1. Debian packages --------------------------------------------------------------------
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done
# Debian's own python3 needs python3-venv for `python3 -m venv` (a pyenv python does not).
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
elif ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi

if [[ ${#missing[@]} -eq 0 ]]; then
    say "apt: all ${#APT_PACKAGES[@]} packages present"
else
    if [[ ${#as_root[@]} -gt 0 ]] && ! command -v sudo >/dev/null 2>&1; then
        say "need root (or sudo) to install: ${missing[*]}" >&2
        exit 1
    fi
    say "apt: installing ${missing[*]}"
    apt_get update
    apt_get install -y "${missing[@]}"
fi

# --- 2. project venv -----------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
    say "venv: creating $VENV with $("$PYTHON" -c 'import sys; print(sys.executable)')"
    quietly "$PYTHON" -m venv "$VENV"
else
    say "venv: $VENV exists"
fi

want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
    say "pip: up to date (pyproject.toml unchanged)"
else
    say "pip: installing -e '.[test]'"
    rm -f "$STAMP"
    quietly "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
    printf '%s\n' "$want" >"$STAMP"
fi

# --- 3. byte-code of the project's own modules ------------------------------------------
# pip compiles what it installs, but an editable install leaves src/ as source. Where
# PYTHONDONTWRITEBYTECODE is set (this CI machine sets it), every `fab` and `leaseguard` run
# and every sandbox process would compile ~50 modules as it starts (~150 ms each time).
# compileall skips what is up to date, and Python ignores a stale .pyc, so an edit is seen.
quietly "$VENV/bin/python" -m compileall -q src sandbox fabfile.py
say "byte-code: src/, sandbox/ and fabfile.py compiled"
