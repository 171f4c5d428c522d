"""Numbers are written in ASCII digits: Python's float() and int() (and a regex's \\d) read
Arabic-Indic and full-width digits as numbers, so either spelling of 3600 would become a
3600 s timeout. Every front refuses them as a usage or lookup error that never repeats the
value (a misnamed variable could point at a secret)."""

import pytest

from leaseguard.cli.main import number_arg
from leaseguard.core.config_values import NOT_ASCII, refuse_non_ascii_numbers
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import ConfigError, TimeoutValueError
from leaseguard.core.lookups import parse_timeout_s
from leaseguard.orchestration.drain_run import drain_options
from tests.support.leaseguard_cli import leaseguard

ARABIC_INDIC = "\u0663\u0666\u0660\u0660"  # 3600
FULL_WIDTH = "\uff13\uff16\uff10\uff10"  # 3600
OTHER_DIGITS = [ARABIC_INDIC, FULL_WIDTH, f" {FULL_WIDTH}\n", "3\uff1600", "36.\u0660"]


def test_python_itself_reads_these_as_numbers():
    assert float(ARABIC_INDIC) == float(FULL_WIDTH) == 3600.0


@pytest.mark.parametrize("text", OTHER_DIGITS)
def test_a_timeout_in_other_digits_is_refused_without_echoing_it(text):
    with pytest.raises(TimeoutValueError) as caught:
        parse_timeout_s(text, what="docker:backend/APP_TASK_TIMEOUT_S")
    assert str(caught.value) == "docker:backend/APP_TASK_TIMEOUT_S is not a number of seconds"


@pytest.mark.parametrize("text", ["3600", " 3600\n", "3600.5", "\t90 "])
def test_ascii_digits_with_a_decimal_point_and_whitespace_still_parse(text):
    assert parse_timeout_s(text) == float(text)


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({"task_timeout": {"source": "fixed", "value_s": FULL_WIDTH}}, "task_timeout.value_s"),
        ({"task_timeout": {"default_s": ARABIC_INDIC}}, "task_timeout.default_s"),
        ({"clock_skew_s": FULL_WIDTH}, "clock_skew_s"),
        ({"statement_timeout_ms": ARABIC_INDIC}, "statement_timeout_ms"),
        ({"lease": {"multiplier": "\uff12"}}, "lease.multiplier"),
    ],
)
def test_a_config_number_in_other_digits_is_a_usage_error_naming_the_key(keys, key):
    with pytest.raises(ConfigError) as caught:
        contract_from_mapping(keys)
    assert str(caught.value) == f"{key} {NOT_ASCII}"


def test_a_config_number_in_ascii_text_is_still_read():
    contract = contract_from_mapping({"task_timeout": {"source": "fixed", "value_s": "3600"}})
    assert contract.task_timeout.value_s == 3600.0


@pytest.mark.parametrize("key", ["deadline_s", "poll_s", "resume_retry_s"])
def test_a_drain_duration_in_other_digits_is_refused(key):
    """What `fab drain --deadline-s` and `drain:` in fabric.yaml go through."""
    with pytest.raises(ConfigError, match=f"drain.{key} must be a number of seconds"):
        drain_options({key: FULL_WIDTH})
    assert getattr(drain_options({key: "12.5"}), key) == 12.5


def test_the_ansible_pre_check_names_the_option_nested_or_not():
    spec = {
        "task_timeout_s": {"type": "float"},
        "task_timeout": {"type": "dict", "options": {"default_s": {"type": "float"}}},
        "table": {"type": "str"},
    }
    refuse_non_ascii_numbers({"task_timeout_s": "3600", "table": FULL_WIDTH}, spec)
    with pytest.raises(ConfigError) as caught:
        refuse_non_ascii_numbers({"task_timeout_s": ARABIC_INDIC}, spec)
    assert str(caught.value) == f"task_timeout_s {NOT_ASCII}"
    with pytest.raises(ConfigError) as caught:
        refuse_non_ascii_numbers({"task_timeout": {"default_s": FULL_WIDTH}}, spec)
    assert str(caught.value) == f"task_timeout.default_s {NOT_ASCII}"


def test_a_cli_number_flag_refuses_other_digits():
    assert number_arg(" 2.5 ") == 2.5
    with pytest.raises(Exception, match="ASCII digits"):
        number_arg(FULL_WIDTH)


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--task-timeout-s", FULL_WIDTH],
        ["check", "--clock-skew-s", ARABIC_INDIC],
        ["drain", "--deadline-s", FULL_WIDTH],
    ],
)
def test_the_cli_exits_2_without_echoing_the_value(args):
    done = leaseguard(*args, "--dsn", "dbname=none")
    assert done.returncode == 2, done.stderr
    assert FULL_WIDTH not in done.stderr + done.stdout
    assert ARABIC_INDIC not in done.stderr + done.stdout
    assert "ASCII digits" in done.stderr or "not a number of seconds" in done.stderr
