"""The pure parts of items 5 and 6: per-kind lease parameters, offline index advice."""

from datetime import timedelta

import pytest

from leaseguard.adapters.indexing import offline_advice
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.predicate import expiry, predicate_params


def river(**keys):
    return contract_from_mapping({"preset": "river", **keys})


def test_each_kind_s_timeout_is_bound_and_the_longer_of_it_and_the_lease_is_taken_in_sql():
    contract = river(kind_timeouts={"long": 10800, "short": 60, "free": "unlimited"})
    params = predicate_params(contract, lease_s=3600.0, runtime_started_at=None)
    assert params["kinds"] == ["long", "short"]
    assert params["kind_timeouts"] == [timedelta(hours=3), timedelta(minutes=1)]
    assert "greatest(k.kind_timeout, lg_subject.lg_lease)" in expiry(contract).as_string(None)
    assert params["unlimited_kinds"] == ["free"]


def test_without_kind_timeouts_the_statement_and_its_parameters_are_unchanged():
    plain = river()
    assert "kinds" not in predicate_params(plain, lease_s=3600.0, runtime_started_at=None)
    assert "unnest" not in expiry(plain).as_string(None)


def test_kind_names_and_numbers_never_appear_in_the_sql():
    text = expiry(river(kind_timeouts={"it's": 7200})).as_string(None)
    assert "it's" not in text and "7200" not in text
    assert "%(kinds)s" in text and "%(unlimited_kinds)s" in text


def test_equal_kind_timeouts_make_equal_contracts_with_equal_hashes():
    """Composed statements are cached per contract: it must stay hashable."""
    one, two = river(kind_timeouts={"a": 1, "b": -1}), river(kind_timeouts={"b": -1, "a": 1})
    assert one == two and hash(one) == hash(two)


@pytest.mark.parametrize("preset", ["pg-boss"])
def test_offline_advice_for_a_partitioned_preset_holds_no_statement(preset):
    lines = offline_advice(contract_from_mapping({"preset": preset}))
    assert lines and all(line.startswith("-- ") for line in lines)


def test_offline_advice_for_procrastinate_leads_with_the_status_alone():
    [*_, statement] = offline_advice(contract_from_mapping({"preset": "procrastinate"}))
    assert statement.endswith('ON "procrastinate_jobs" ("status");')
