"""The broker and the client reach the mirroring application only through the hook they are
handed (sparklog.protocol.hooks.MirrorLinks): with it, mirror link calls work on a root;
without it, they and the broker key ``mirror_links`` are refused in one line."""

from __future__ import annotations

import pytest

from sparklog.broker_lite.config import BrokerConfig
from sparklog.broker_lite.service import Broker
from sparklog.client.transports import open_backend
from sparklog.errors import InvalidConfigurationError
from sparklog.mirror.admin import RootLinks
from sparklog.protocol.hooks import MirrorLinks


def test_an_embedded_root_runs_mirror_link_calls_through_the_hook_it_is_handed(tmp_path):
    source = f"file://{tmp_path}/src"
    open_backend(source).close()
    with_hook = open_backend(f"file://{tmp_path}/dest", mirror=RootLinks)
    try:
        made = with_hook.create_mirror_link("dr", source=source, topics="orders")
        assert (made["name"], made["state"]) == ("dr", "active")
        assert [x["name"] for x in with_hook.list_mirror_links()] == ["dr"]
    finally:
        with_hook.close()
    without = open_backend(f"file://{tmp_path}/dest")
    try:
        with pytest.raises(InvalidConfigurationError, match="mirroring application"):
            without.list_mirror_links()
    finally:
        without.close()


def test_a_broker_without_the_hook_refuses_mirror_links(tmp_path):
    root = f"file://{tmp_path}/root"
    bare = Broker(BrokerConfig(root=root, cleaner_interval_ms=0, mirror_links="dr"))
    try:
        with pytest.raises(InvalidConfigurationError, match="mirror_links"):
            bare.start("127.0.0.1:1")
        with pytest.raises(InvalidConfigurationError, match="mirroring application"):
            bare.mirror_links()
    finally:
        bare.close()
    hooked = Broker(BrokerConfig(root=root, cleaner_interval_ms=0), mirror=RootLinks)
    try:
        links: MirrorLinks = hooked.mirror_links()
        assert links.list_all() == []
    finally:
        hooked.close()
