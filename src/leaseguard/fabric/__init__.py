"""The Fabric front: `fab guard`, `fab drain`, `fab resume` (tasks.py; fabfile.py loads it).

Fabric is the `leaseguard[fabric]` extra: without it, importing this front says so.
"""

try:
    import fabric  # noqa: F401
except ModuleNotFoundError as exc:
    msg = f"leaseguard's Fabric tasks need Fabric ({exc.name} is not installed): "
    raise ModuleNotFoundError(msg + "pip install 'leaseguard[fabric]'", name=exc.name) from exc
