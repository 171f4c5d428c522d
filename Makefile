# `make test` is the one command: set up the machine and the venv, lint, type-check, test.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
# molecule, ansible-* and friends are looked up on PATH by the tests.
export PATH := $(BIN):$(PATH)

LINT_PATHS := $(wildcard src tests plugins benchmarks)
PYTEST_ARGS ?=

.PHONY: venv bootstrap collection-link lint typecheck test demo sanity bench clean

venv bootstrap:
	@VENV=$(VENV) bash scripts/bootstrap.sh

collection-link:
	@bash scripts/collection-link.sh

lint: bootstrap collection-link
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/ansible-lint --nocolor -q
	rm -rf .ansible

typecheck: bootstrap
	$(BIN)/mypy

test: bootstrap lint typecheck collection-link sanity
	$(BIN)/pytest $(PYTEST_ARGS)

demo: bootstrap
	@echo "demo: arrives with the Ansible roles; nothing to show yet"

sanity: bootstrap
	PYTHON=$(PY) bash scripts/ansible-test-sanity.sh

# Benchmarks (root, ~5-10 min on 2 cores): writes benchmarks/RESULTS.md, prints the same.
bench: bootstrap
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis tests/output
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
