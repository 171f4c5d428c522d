"""The Fabric front (tasks.py; fabfile.py loads it): the `leaseguard[fabric]` extra."""

try:
    import fabric  # noqa: F401
except ModuleNotFoundError as exc:
    msg = f"leaseguard's Fabric tasks need Fabric ({exc.name} is not installed): "
    raise ModuleNotFoundError(msg + "pip install 'leaseguard[fabric]'", name=exc.name) from exc
