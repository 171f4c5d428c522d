"""leaseguard's local sandbox: real hosts on this machine to run the collection, the CLI and
the Fabric tasks against, without touching anything outside it (root, Linux).

A host is a network namespace with sshd on port 22 (:mod:`sandbox.hosts`, :mod:`sandbox.netns`,
:mod:`sandbox.sshd`), whose SSH sessions see a private podman engine as their Docker daemon
(:mod:`sandbox.podman`); the first host has PostgreSQL 15 with pg_cron on its own loopback
(:mod:`sandbox.pgcluster`). ``python -m sandbox start|stop|serve --dir D``
(:mod:`sandbox.detached`) runs them in a process of their own that outlives its caller: ``make
demo`` (scripts/demo.py), the molecule scenarios' create/destroy playbooks and the benchmarks
use it, and the test suite's fixtures (tests/support/*_fixtures.py) build on the same parts.

It is a part of the repository, not of the product: the wheel and the collection tarball do
not ship it. It needs the package's runtime dependencies (psycopg, fabric, PyYAML) and never
pytest: molecule's create step runs it without the test extras (tests/unit/test_layout.py
holds it to that).
"""
