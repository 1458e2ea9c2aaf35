"""The broker and the client reach the mirroring application only through a hook
(sparklog.protocol.hooks.MirrorLinks): the one they are handed, else the shipped
application loaded by name on the first mirror call; with neither, mirror link calls and
the broker key ``mirror_links`` are refused in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.client.transports import open_backend
from sparklog.errors import InvalidConfigurationError
from sparklog.mirror.admin import RootLinks
from sparklog.protocol import hooks
from sparklog.protocol.actions import CREATE_MIRROR_LINK, LIST_MIRROR_LINKS
from sparklog.protocol.hooks import MirrorLinks


def test_an_embedded_root_runs_mirror_link_calls_through_the_hook_it_is_handed(tmp_path):
    source = f"file://{tmp_path}/src"
    open_backend(source).close()
    with_hook = open_backend(f"file://{tmp_path}/dest", mirror=RootLinks)
    try:
        made = with_hook.call(CREATE_MIRROR_LINK, name="dr", source=source, topics="orders")
        assert (made["name"], made["state"]) == ("dr", "active")
        assert [x["name"] for x in with_hook.call(LIST_MIRROR_LINKS)] == ["dr"]
    finally:
        with_hook.close()
    handed_none = open_backend(f"file://{tmp_path}/dest")  # a Python program's own Admin
    try:
        assert [x["name"] for x in handed_none.call(LIST_MIRROR_LINKS)] == ["dr"]
    finally:
        handed_none.close()


def test_without_any_mirroring_application_the_calls_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(hooks, "DEFAULT_MIRROR_LINKS", "sparklog.no_such_module:Links")
    without = open_backend(f"file://{tmp_path}/dest")
    try:
        with pytest.raises(InvalidConfigurationError, match="mirroring application"):
            without.call(LIST_MIRROR_LINKS)
    finally:
        without.close()
    root = f"file://{tmp_path}/root"
    bare = Broker(BrokerConfig(root=root, cleaner_interval_ms=0, mirror_links="dr"))
    try:
        with pytest.raises(InvalidConfigurationError, match="mirror_links"):
            bare.start("127.0.0.1:1")
        with pytest.raises(InvalidConfigurationError, match="mirroring application"):
            bare.mirror_links()
    finally:
        bare.close()


def test_a_broker_uses_the_hook_it_is_handed(tmp_path):
    hooked = Broker(
        BrokerConfig(root=f"file://{tmp_path}/root", cleaner_interval_ms=0), mirror=RootLinks
    )
    try:
        links: MirrorLinks = hooked.mirror_links()
        assert links.list_all() == []
    finally:
        hooked.close()


def test_a_broker_that_serves_no_mirror_call_never_imports_the_application(tmp_path):
    script = (
        "import sys\n"
        "from sparklog.broker_lite.config import BrokerConfig\n"
        "from sparklog.broker_lite.service import Broker\n"
        f"b = Broker(BrokerConfig(root={f'file://{tmp_path}/root'!r}, cleaner_interval_ms=0))\n"
        "b.start('127.0.0.1:1')\n"
        "b.close()\n"
        "print(sorted(m for m in sys.modules if m.startswith('sparklog.mirror')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
