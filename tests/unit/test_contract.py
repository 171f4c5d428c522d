import pytest

from leaseguard.core.contract import (
    Contract,
    contract_from_mapping,
    load_config_file,
    load_contract,
    merge_layers,
)
from leaseguard.core.errors import ConfigError

INVALID_CASES = [
    ({"tabel": "x"}, "unknown config key(s): tabel"),
    ({"lease": {"multipler": 2}}, "unknown config key(s): lease.multipler"),
    ({"table": ""}, "table must be a non-empty string"),
    ({"table": 5}, "table must be a non-empty string"),
    ({"table": "x" * 64}, "table is longer than 63 bytes"),
    ({"claimed_statuses": []}, "claimed_statuses must name at least one status"),
    ({"claimed_statuses": [1]}, "claimed_statuses must be a list of non-empty strings"),
    ({"queued_statuses": ["running"]}, "status 'running' is in both claimed_statuses and queued"),
    (
        {"finished_statuses": ["open"]},
        "status 'open' is in both queued_statuses and finished_statuses",
    ),
    (
        {"claimed_statuses": ["done"], "finished_statuses": ["done"]},
        "status 'done' is in both claimed_statuses and finished_statuses",
    ),
    ({"finished_statuses": [""]}, "finished_statuses must be a list of non-empty strings"),
    ({"lease": {"multiplier": 0.5}}, "lease.multiplier must be a finite number >= 1"),
    ({"lease": {"multiplier": "inf"}}, "lease.multiplier must be a finite number >= 1"),
    ({"lease": {"multiplier": True}}, "lease.multiplier must be a number"),
    ({"lease": 3}, "lease must be a mapping"),
    ({"task_timeout": {"source": "k8s"}}, "task_timeout.source must be one of"),
    ({"task_timeout": {"default_s": 0}}, "task_timeout.default_s must be greater than 0"),
    ({"task_timeout": {"default_s": -3}}, "task_timeout.default_s must be a finite number >= 0"),
    ({"task_timeout": {"source": "fixed"}}, "task_timeout.value_s is required"),
    ({"task_timeout": {"source": "systemd"}}, "task_timeout.unit is required"),
    ({"task_timeout": {"source": "process"}}, "task_timeout.pid_file is required"),
    ({"task_timeout": {"source": "env_file"}}, "task_timeout.path is required"),
    ({"task_timeout": {"source": "command"}}, "task_timeout.command is required"),
    ({"runtime": {"source": "fixed"}}, "runtime.started_at is required"),
    ({"clock_skew_s": -1}, "clock_skew_s must be a finite number >= 0"),
    ({"statement_timeout_ms": 0}, "statement_timeout_ms must be greater than 0"),
    ({"statement_timeout_ms": "soon"}, "statement_timeout_ms must be a whole number"),
]


@pytest.mark.parametrize(("data", "message"), INVALID_CASES)
def test_invalid_configs_are_rejected_naming_the_key(data, message):
    with pytest.raises(ConfigError) as caught:
        contract_from_mapping(data)
    assert str(caught.value).startswith(message)


def test_the_defaults_are_the_documented_contract():
    contract = contract_from_mapping({})
    assert contract == Contract()
    assert contract.table == "execution_runs"
    assert contract.claimed_statuses == ("running",)
    assert contract.queued_statuses == ("open",)
    assert contract.finished == ("done", "failed")
    assert contract.classified_statuses == ("running", "open", "done", "failed")
    assert contract.lease.multiplier == 2.0
    assert contract.task_timeout.variable == "APP_TASK_TIMEOUT_S"
    assert contract.statement_timeout_ms == 5000


def test_a_single_status_string_is_a_list_of_one():
    assert contract_from_mapping({"claimed_statuses": "busy"}).claimed_statuses == ("busy",)


def test_default_finished_statuses_give_way_to_explicit_claimed_or_queued_ones():
    assert contract_from_mapping({"claimed_statuses": ["failed"]}).finished == ("done",)
    assert contract_from_mapping({"finished_statuses": []}).finished == ()
    explicit = contract_from_mapping({"finished_statuses": ["succeeded"]})
    assert explicit.finished == explicit.finished_statuses == ("succeeded",)


def test_lock_timeout_never_exceeds_the_statement_budget():
    contract = contract_from_mapping({"statement_timeout_ms": 500, "lock_timeout_ms": 2000})
    assert contract.effective_lock_timeout_ms == 500


class TestMergeLayers:
    def test_later_layers_win_key_by_key(self):
        merged = merge_layers({"table": "a", "lease": {"multiplier": 3}}, {"table": "b"})
        assert merged == {"table": "b", "lease": {"multiplier": 3}}

    def test_nested_sections_merge_instead_of_replacing(self):
        merged = merge_layers(
            {"task_timeout": {"source": "docker", "container": "api"}},
            {"task_timeout": {"variable": "T"}},
        )
        assert merged["task_timeout"] == {"source": "docker", "container": "api", "variable": "T"}

    def test_missing_layers_are_skipped(self):
        assert merge_layers(None, {"table": "t"}, None) == {"table": "t"}


def test_config_file_may_nest_keys_under_leaseguard(tmp_path):
    path = tmp_path / "fabric.yaml"
    path.write_text("leaseguard:\n  table: jobs\n  lease:\n    multiplier: 3\n")
    contract = load_contract(load_config_file(path))
    assert contract.table == "jobs"
    assert contract.lease.multiplier == 3.0


def test_config_file_errors_name_the_file_but_not_its_content(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("table: [unclosed password=hunter2\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(path) in str(caught.value)
    assert "hunter2" not in str(caught.value)


# --- preset and timestamp_zone --------------------------------------------------------------


def test_a_preset_is_a_base_layer_that_every_explicit_key_overrides():
    contract = load_contract({"preset": "river"}, {"claimed_statuses": ["running", "stuck"]})
    assert (contract.table, contract.status_column) == ("river_job", "state")
    assert contract.claimed_statuses == ("running", "stuck")
    assert contract.lease.multiplier == 1.0
    assert (contract.task_timeout.source, contract.task_timeout.value_s) == ("fixed", 3600.0)
    assert contract.preset == "river"


def test_a_preset_in_a_later_layer_still_sits_below_an_earlier_explicit_key():
    contract = load_contract({"table": "jobs"}, {"preset": "oban"})
    assert contract.table == "jobs"
    assert contract.schema == "public"


def test_an_unknown_preset_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match=r"preset must be one of .*graphile_worker.*river"):
        contract_from_mapping({"preset": "sidekiq"})


def test_graphile_worker_reads_attempts_not_a_status_column():
    columns = contract_from_mapping({"preset": "graphile_worker"}).columns()
    assert "status_column" not in columns
    assert set(columns.values()) == {"id", "locked_at", "attempts", "max_attempts"}


def test_pg_boss_rows_carry_their_own_expiry():
    contract = contract_from_mapping({"preset": "pg-boss"})
    assert contract.rows_carry_expiry
    assert {"expire_seconds", "heartbeat_on", "heartbeat_seconds"} <= set(
        contract.columns().values()
    )


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/New_York"])
def test_timestamp_zone_takes_iana_names(zone):
    assert contract_from_mapping({"timestamp_zone": zone}).timestamp_zone == zone


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd", 5])
def test_timestamp_zone_refuses_what_is_not_a_zone(zone):
    with pytest.raises(ConfigError, match="timestamp_zone"):
        contract_from_mapping({"timestamp_zone": zone})


def test_timestamp_zone_has_no_default_a_naive_column_must_declare_it():
    assert Contract().timestamp_zone is None
    assert contract_from_mapping({"timestamp_zone": None}).timestamp_zone is None


def test_que_reads_no_claim_time_only_what_says_a_job_is_done():
    """Que's advisory lock records no time: no claimed_at column is required or read."""
    contract = contract_from_mapping({"preset": "que"})
    assert not contract.has_status_column and not contract.has_claimed_at
    assert set(contract.columns().values()) == {"id", "finished_at", "expired_at"}


def test_good_job_reads_its_lock_columns_and_no_status():
    contract = contract_from_mapping({"preset": "good_job"})
    assert not contract.has_status_column
    assert set(contract.columns().values()) == {"id", "locked_at", "locked_by_id", "finished_at"}
    assert (contract.timestamp_zone, contract.task_timeout.value_s) == ("UTC", 300.0)
