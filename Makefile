# `make test` is the one command: set up the machine and the venv, lint, type-check, test.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
# molecule, ansible-* and friends are looked up on PATH by the tests.
export PATH := $(BIN):$(PATH)

LINT_PATHS := $(wildcard src sandbox tests plugins benchmarks scripts)
PYTEST_ARGS ?=

.PHONY: venv bootstrap collection-link collection lint typecheck test test-fast demo demo-down molecule sanity bench bench-compare clean

venv bootstrap:
	@VENV=$(VENV) bash scripts/bootstrap.sh

collection-link:
	@bash scripts/collection-link.sh

lint: bootstrap collection-link
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ansible-lint --nocolor -q
	rm -rf .ansible

typecheck: bootstrap
	$(BIN)/mypy

test: bootstrap lint typecheck collection-link sanity
	$(BIN)/pytest $(PYTEST_ARGS)

# Pure and single-service tests (PostgreSQL only: no sandbox hosts, podman, molecule or
# injected faults), a few minutes on 2 cores; `make test` runs everything.
FAST_MARKS := not slow and not molecule and not faults and not hosts
test-fast: bootstrap collection-link
	$(BIN)/pytest -m "$(FAST_MARKS)" tests/unit tests/integration $(PYTEST_ARGS)

# The story on a throw-away local sandbox (root, well under 2 min). KEEP=1 leaves the sandbox
# running (its directory is recorded in build/demo-sandbox); `make demo-down` removes it.
demo: bootstrap collection-link
	$(PY) scripts/demo.py $(if $(filter 1 yes true,$(KEEP)),--keep)

demo-down:
	$(PY) scripts/demo.py --down

# One molecule scenario as a contributor runs it (root), from a fresh clone too: S=restart_defer
# (default: the `default` scenario; S=all runs every one). Each scenario starts its own sandbox
# (`python -m sandbox`) under /tmp/lgm-* and removes it at destroy. molecule needs the venv's
# ansible-* on PATH, which this Makefile exports.
S ?= default
molecule: bootstrap collection-link
	$(BIN)/molecule test $(if $(filter all,$(S)),--all,-s $(S))

# The Galaxy release tarball (dist/leaseguard-deploy-<version>.tar.gz), carrying the core.
collection: bootstrap
	$(PY) scripts/build_collection.py --output-path dist

# ansible-test sanity on the oldest and the newest ansible-core that meta/runtime.yml admits,
# each in its own venv under build/sanity/ (2.20 and later need Python 3.12: skipped, saying
# so, on a machine without one).
SANITY_ANSIBLE_CORE ?= 2.17 2.21
sanity: bootstrap
	ANSIBLE_CORE="$(SANITY_ANSIBLE_CORE)" PYTHON=$(PY) bash scripts/ansible-test-sanity.sh

# Benchmarks (root, ~5-10 min on 2 cores): writes benchmarks/RESULTS.md, prints the same.
bench: bootstrap collection-link
	$(PY) -m benchmarks.run

# The figures users feel, before (BEFORE=<git rev>, installed under /tmp) and after, in one run.
bench-compare: bootstrap collection-link
	$(PY) -m benchmarks.compare --before $(BEFORE)

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis tests/output
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
