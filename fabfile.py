"""`fab guard` / `fab drain`: leaseguard's Fabric tasks (the code lives in the package)."""

from leaseguard.fabric.tasks import collection

ns = collection()
