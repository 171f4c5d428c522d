"""`schema` and `relation_kind` are contract keys in every front: a config file, the CLI's
flags, Fabric's `leaseguard:` section and the Ansible options."""

import importlib
import sys

import pytest

from leaseguard.cli.main import build_parser, contract_from_args
from leaseguard.core.contract import Contract, contract_from_mapping
from leaseguard.core.errors import ConfigError
from leaseguard.core.predicate import table_identifier
from leaseguard.fabric.tasks import settings_from_config
from tests.support.ansible_run import REPO

sys.path.insert(0, str(REPO / "build" / "collections"))  # the link `make collection-link` makes
specs = importlib.import_module("ansible_collections.leaseguard.deploy.plugins.module_utils._specs")


def test_the_defaults_are_a_table_found_by_search_path():
    contract = Contract()
    assert (contract.schema, contract.relation_kind) == (None, "table")


def test_a_schema_names_the_table_as_two_identifiers_never_one_dotted_name():
    contract = contract_from_mapping({"schema": "jobs", "table": "runs.x"})
    assert table_identifier(contract).as_string(None) == '"jobs"."runs.x"'
    assert contract.table_label == "jobs.runs.x"


def test_relation_kind_takes_table_or_view_only():
    assert contract_from_mapping({"relation_kind": "view"}).relation_kind == "view"
    with pytest.raises(ConfigError, match="relation_kind must be one of table, view"):
        contract_from_mapping({"relation_kind": "materialized_view"})


def test_the_cli_flags_set_both_keys():
    args = build_parser().parse_args(
        ["check", "--schema", "jobs", "--relation-kind", "view", "--table", "runs"]
    )
    contract = contract_from_args(args)
    assert (contract.schema, contract.table, contract.relation_kind) == ("jobs", "runs", "view")


def test_the_cli_refuses_another_relation_kind():
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["check", "--relation-kind", "matview"])
    assert caught.value.code == 2


def test_fabric_reads_both_from_its_leaseguard_section():
    settings = settings_from_config(
        {"leaseguard": {"schema": "jobs", "relation_kind": "view", "connection": {}}}
    )
    assert (settings.contract.schema, settings.contract.relation_kind) == ("jobs", "view")


def test_ansible_has_both_options_and_role_variables():
    spec = specs.module_spec("lease_guard")[0]
    assert spec["relation_kind"]["choices"] == ["table", "view"]
    assert spec["schema"]["type"] == "str"
    variables = specs.role_variables("lease_guard")
    assert variables["schema"] == "leaseguard_schema"
    assert variables["relation_kind"] == "leaseguard_relation_kind"
