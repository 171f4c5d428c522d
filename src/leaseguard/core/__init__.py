"""The core: pure judgment (contract, predicate, verdict, fleet rule, budgets planning).

No network, no subprocess, no SSH, no connection opened here (psycopg's sql composition is
fine); import-linter and tests/unit/test_layout.py enforce it (docs/architecture.md).
"""
