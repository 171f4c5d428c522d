"""docs/configuration.md and the code cannot drift apart.

Every config key the code accepts (the contract, Fabric's `connection:`, `drain:`, the
`cron_budgets:` section) has a row in the reference, every row names a key the code accepts,
documented defaults are the code's defaults, and the CLI flags and Ansible variables the rows
name exist. The README's short contract table is held to the same keys and defaults.
"""

import argparse
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from leaseguard.cli.main import build_parser
from leaseguard.core.budgets import config as budgets
from leaseguard.core.contract import CONFIG_KEYS, Contract
from leaseguard.fabric.tasks import CONNECTION_KEYS, settings_from_config
from leaseguard.orchestration.drain_run import DrainOptions

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "configuration.md"
README = REPO / "README.md"

# Reference section heading -> how its rows are keyed.
CONTRACT = "Contract keys"
CONNECTION = "`connection:` (Fabric)"
DRAIN = "`drain:`"
CRON_BUDGETS = "`cron_budgets:`"


def sections(path):
    """{heading: text} for every `## heading` of a Markdown file."""
    found, heading = {}, None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            found[heading] = []
        elif heading is not None:
            found[heading].append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def rows(text):
    """Table rows whose first cell is a `key`: {key: [cells after the key]}."""
    table = {}
    for line in text.splitlines():
        match = re.match(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if match:
            key = match.group(1)
            assert key not in table, f"{key} has two rows"
            table[key] = [cell.strip() for cell in match.group(2).split("|")]
    return table


def documented_default(cell):
    """A default cell is one `value` in backticks, read as YAML."""
    match = re.fullmatch(r"`([^`]*)`", cell)
    assert match, f"default {cell!r} is not a single `value`"
    return yaml.safe_load(match.group(1))


def plain(value):
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def contract_default(key):
    if key == "finished_statuses":  # None in the dataclass: "the defaults", resolved here
        return plain(Contract().finished)
    value = Contract()
    for part in key.split("."):
        value = getattr(value, part)
    return plain(value)


def drain_default(key):
    return plain(getattr(DrainOptions(), key.removeprefix("drain.")))


@pytest.fixture(scope="module")
def reference():
    found = sections(REFERENCE)
    for heading in (CONTRACT, CONNECTION, DRAIN, CRON_BUDGETS):
        assert heading in found, f"docs/configuration.md has no section '## {heading}'"
    return {heading: rows(text) for heading, text in found.items()}


def expected_cron_budget_keys():
    keys = set()
    for key in budgets.SECTION_KEYS:
        if key == "jobs":
            keys |= {f"jobs.<name>.{job_key}" for job_key in budgets.JOB_KEYS}
        elif key == "overrides":
            keys.add("overrides.<environment>.<job>")
        else:
            keys.add(key)
    return {f"{budgets.CRON_BUDGETS_SECTION}.{key}" for key in keys}


EXPECTED = {
    CONTRACT: set(CONFIG_KEYS),
    CONNECTION: {f"connection.{key}" for key in CONNECTION_KEYS},
    DRAIN: {f"drain.{field.name}" for field in dataclasses.fields(DrainOptions)},
    CRON_BUDGETS: expected_cron_budget_keys(),
}


@pytest.mark.parametrize("heading", list(EXPECTED))
def test_every_key_in_the_code_has_a_row_and_every_row_is_a_key(reference, heading):
    documented = set(reference[heading])
    assert sorted(EXPECTED[heading] - documented) == [], "in the code, not in the docs"
    assert sorted(documented - EXPECTED[heading]) == [], "in the docs, not in the code"


def test_contract_defaults_are_the_code_defaults(reference):
    for key, cells in reference[CONTRACT].items():
        assert documented_default(cells[0]) == contract_default(key), key


def test_drain_defaults_are_the_code_defaults(reference):
    for key, cells in reference[DRAIN].items():
        assert documented_default(cells[0]) == drain_default(key), key


def test_connection_defaults_are_what_an_empty_section_yields(reference, monkeypatch):
    monkeypatch.delenv("LEASEGUARD_DSN", raising=False)
    settings = settings_from_config({"leaseguard": {}})
    actual = {
        "connection.dsn": settings.conninfo,
        "connection.db_host": settings.address.host,
        "connection.db_port": settings.address.port,
        "connection.known_hosts": settings.ssh.known_hosts,
        "connection.accept_unknown_host_keys": settings.ssh.accept_unknown_host_keys,
        "connection.gateway": settings.ssh.gateway,
    }
    assert set(actual) == EXPECTED[CONNECTION], "a new connection key: add its default here"
    for key, cells in reference[CONNECTION].items():
        assert documented_default(cells[0]) == actual[key], key


def cli_options():
    """Every option string of `leaseguard check` and `leaseguard drain`."""
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        option
        for name in ("check", "drain")
        for option in commands.choices[name]._option_string_actions
    }


def ansible_variables():
    specs = yaml.safe_load((REPO / "roles/guard/meta/argument_specs.yml").read_text())
    return set(specs["argument_specs"]["main"]["options"])


@pytest.mark.parametrize("heading", [CONTRACT, CONNECTION, DRAIN])
def test_the_cli_flags_and_ansible_variables_named_exist(reference, heading):
    flags, variables = cli_options(), ansible_variables()
    for key, cells in reference[heading].items():
        flag, variable = cells[2], cells[3]
        for named in re.findall(r"`(--[a-z-]+)`", flag):
            assert named in flags, f"{key}: leaseguard has no flag {named}"
        for named in re.findall(r"`(leaseguard_[a-z_]+)`", variable):
            assert named in variables, f"{key}: the guard role has no variable {named}"


def test_the_readme_contract_table_uses_real_keys_and_defaults():
    [table] = [text for heading, text in sections(README).items() if "contract keys" in heading]
    keys = rows(table)
    assert len(keys) >= 10
    for key, cells in keys.items():
        assert key in CONFIG_KEYS, f"README: {key} is not a config key"
        assert documented_default(cells[0]) == contract_default(key), key
