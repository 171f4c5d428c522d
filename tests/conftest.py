"""Test-suite wiring: fixtures live in tests/support/*_fixtures.py and are registered here."""

# Order matters: hosts_fixtures imports pg_fixtures.
pytest_plugins = ["tests.support.pg_fixtures", "tests.support.hosts_fixtures"]
