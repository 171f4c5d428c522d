"""Messages that name what is wrong without repeating a value: invalid DSNs, a tool's stderr."""

import pytest

from leaseguard.core.config_values import invalid_dsn
from leaseguard.core.lookups import first_stderr_line

SECRET = "hunter2"


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        (f"dbname=app bogus={SECRET}", "the DSN names an unknown libpq keyword 'bogus'"),
        (f"dbname=app passwd={SECRET}", "the DSN names an unknown libpq keyword 'passwd'"),
        (f"user=x password='{SECRET} x' sslmod=require", "unknown libpq keyword 'sslmod'"),
        (f"dbname=app password={SECRET} x", "not valid after keyword 'password'"),
        (f"postgresql://u:{SECRET}@:x/", "the DSN is not a valid postgresql:// URI"),
        (SECRET, "the DSN is not a valid libpq connection string"),
    ],
)
def test_an_invalid_dsn_names_the_keyword_at_fault_and_never_a_value(dsn, message):
    text = str(invalid_dsn(dsn))
    assert message in text
    assert SECRET not in text


def test_a_valid_keyword_with_a_good_value_is_not_blamed():
    assert "sslmode" not in str(invalid_dsn("sslmode=require host=db bogus=1"))


@pytest.mark.parametrize(
    ("stderr", "line"),
    [
        (
            "\nCannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?\nmore\n",
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?",
        ),
        (f"error during connect: https://u:{SECRET}@h/v1", "https://***@h/v1"),
        (f"bad config password={SECRET} here", "password=*** here"),
        ("tab\there\x1b[31m", "tab here [31m"),
        ("", ""),
    ],
)
def test_a_tools_first_stderr_line_is_shown_sanitized(stderr, line):
    shown = first_stderr_line(stderr)
    assert line in shown
    assert SECRET not in shown


def test_a_long_stderr_line_is_cut():
    assert len(first_stderr_line("x" * 1000)) == 200
