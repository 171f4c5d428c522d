"""The environment a user's shell would give a CLI under test, minus leaseguard/libpq vars."""

import os


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without PG* and LEASEGUARD_* (so tests cannot reach a cluster by accident)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "LEASEGUARD"))}
    env.update(extra)
    return env
