"""`fab -H a,b,...`: each host's Connection is built while other hosts already run lookups.

Fabric's Connection() writes to the config it is given, and every write re-merges the whole
config, which is empty for that moment. When the hosts shared the task's config, a host
whose lookup read it during another host's Connection() failed ("running a lookup over SSH
failed (AttributeError)": 2 of 150 runs of `fab guard` over 20 hosts).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from fabric import Config
from invoke.context import Context

from leaseguard.adapters import ssh
from leaseguard.core.errors import TunnelError
from leaseguard.fabric import tasks
from leaseguard.fabric.tasks import connection_to, settings_from_config

SETTINGS = settings_from_config({"leaseguard": {"connection": {}}})


def task_context() -> Context:
    """The task's context as `fab -i KEY` makes it: a fabric Config with a CLI override."""
    config = Config(overrides={"connect_kwargs": {"key_filename": ["/keys/id_ed25519"]}})
    return Context(config=config)


@pytest.fixture
def fast_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond, so that a window of a few bytecodes is hit."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_a_hosts_connection_has_its_own_config_and_keeps_the_tasks_settings():
    c = task_context()
    before = c.config._modifications, dict(c.config)
    connection = connection_to("root@app1", c, SETTINGS)
    assert connection.config is not c.config
    assert (c.config._modifications, dict(c.config)) == before
    assert connection.connect_kwargs["key_filename"] == ["/keys/id_ed25519"]
    assert (connection.user, connection.host) == ("root", "app1")


def test_the_task_config_stays_readable_while_other_hosts_connect(fast_thread_switches):
    """What a running host reads (`config.runners`, as Connection.run does) is never empty."""
    c = task_context()
    building = threading.Event()
    misses: list[str] = []

    def read_like_a_running_host() -> None:
        while building.is_set():
            try:
                c.config.runners.remote  # noqa: B018 - the read is the point
            except AttributeError as exc:
                misses.append(str(exc).splitlines()[0])

    building.set()
    reader = threading.Thread(target=read_like_a_running_host)
    reader.start()
    try:
        for i in range(80):
            connection_to(f"root@app{i}", c, SETTINGS)
    finally:
        building.clear()
        reader.join()
    assert misses == []


def test_the_settings_show_neither_the_dsn_nor_the_cron_password():
    section = {"connection": {"dsn": "dbname=app password=s3cret"}}
    section["drain"] = {"cron_password": "hunter2"}
    settings = settings_from_config({"leaseguard": section})
    assert "s3cret" not in repr(settings)
    assert "hunter2" not in repr(settings)
    assert settings.parsed().drain.cron_password == "hunter2"


class FakeConnection:
    def __init__(self, host: str) -> None:
        self.host, self.closed = host, threading.Event()

    def close(self) -> None:
        self.closed.set()


def test_a_failed_connection_closes_at_once_and_one_still_opening_once_it_opens(monkeypatch):
    """The task never waits for a host still connecting: that one is closed once it opens."""
    release, made = threading.Event(), dict[str, FakeConnection]()

    def open_connection(connection: FakeConnection) -> None:
        if connection.host == "bad":
            raise TunnelError("host bad unreachable")
        assert release.wait(30)

    def connection_to(host: str, c: object, settings: object) -> FakeConnection:
        return made.setdefault(host, FakeConnection(host))

    monkeypatch.setattr(tasks, "connection_to", connection_to)
    monkeypatch.setattr(ssh, "open_connection", open_connection)
    with tasks.connecting(["slow", "bad"], task_context(), SETTINGS) as connections:
        with pytest.raises(TunnelError, match="host bad unreachable"):
            connections["bad"].result(timeout=30)
        assert made["bad"].closed.wait(30)  # as its failure is raised, not at the task's end
        assert not connections["slow"].done()
    assert not made["slow"].closed.is_set()  # the task's end did not wait for it
    release.set()
    assert connections["slow"].result(timeout=30) is made["slow"]
    assert made["slow"].closed.wait(30)
