"""The Fabric front: `fab guard` / `fab drain` (tasks.py; fabfile.py loads its collection).

Fabric is the `leaseguard[fabric]` extra: without it, importing this front says so, instead
of a bare ModuleNotFoundError from deep inside.
"""

try:
    import fabric  # noqa: F401  (the third-party package: imports here are absolute)
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"leaseguard's Fabric tasks need Fabric ({exc.name} is not installed): "
        "pip install 'leaseguard[fabric]'",
        name=exc.name,
    ) from exc
