import pytest

from leaseguard.core.errors import TimeoutValueError
from leaseguard.core.lookups import parse_timeout_s

VALID_CASES = [
    ("3600", 3600.0),
    ("3600.0", 3600.0),
    (" 3600 \n", 3600.0),
    ("\t90\n", 90.0),
    ("0.5", 0.5),
    ("1e3", 1000.0),
    ("+60", 60.0),
    (3600, 3600.0),
    (12.5, 12.5),
]

INVALID_CASES = [
    ("", "task timeout is empty, expected a number of seconds"),
    ("   \n", "task timeout is empty, expected a number of seconds"),
    ("abc", "task timeout is not a number of seconds"),
    ("-1", "task timeout must be greater than 0 seconds"),
    ("-5", "task timeout must be greater than 0 seconds"),
    ("-0.5", "task timeout must be greater than 0 seconds"),
    ("--5", "task timeout is not a number of seconds"),
    ("0", "task timeout must be greater than 0 seconds"),
    ("0.0", "task timeout must be greater than 0 seconds"),
    ("inf", "task timeout is not a number of seconds"),
    ("nan", "task timeout is not a number of seconds"),
    ("1_000", "task timeout is not a number of seconds"),
    ("3600s", "task timeout is not a number of seconds"),
    ("1e999", "task timeout is not finite"),
    (float("inf"), "task timeout is not finite"),
    (float("nan"), "task timeout is not finite"),
    (-5, "task timeout must be greater than 0 seconds"),
    (True, "task timeout is a boolean, not a number of seconds"),
    (None, "task timeout has type NoneType, expected a number"),
]


@pytest.mark.parametrize(("text", "expected"), VALID_CASES)
def test_positive_finite_numbers_parse(text, expected):
    assert parse_timeout_s(text) == expected


@pytest.mark.parametrize(("text", "message"), INVALID_CASES)
def test_anything_else_is_rejected_with_a_clear_message(text, message):
    with pytest.raises(TimeoutValueError) as caught:
        parse_timeout_s(text)
    assert str(caught.value) == message


def test_the_message_names_the_source_but_never_echoes_the_value():
    secret = "postgres://app:hunter2@db/app"
    with pytest.raises(TimeoutValueError) as caught:
        parse_timeout_s(secret, what="docker:backend/DATABASE_URL")
    assert "hunter2" not in str(caught.value)
    assert str(caught.value).startswith("docker:backend/DATABASE_URL")
