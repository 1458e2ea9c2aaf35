"""A broker's CPU does not grow with its topics while they are idle (issue 37 item 6): the
root describes each version of a topic once, and the once-a-tick reload of the open
topics walks none while the metadata image's topics are unchanged."""

from __future__ import annotations

import uuid

from sparklog.storage import make_batch, open_root
from sparklog.storage.topic_info import TopicInfo
from tests.chaos.inproc import inproc_broker


def _counting_descriptions(monkeypatch) -> list[str]:
    built: list[str] = []
    original = TopicInfo.from_doc.__func__

    def counted(cls, version, doc):  # type: ignore[no-untyped-def]
        built.append(doc["name"])
        return original(cls, version, doc)

    monkeypatch.setattr(TopicInfo, "from_doc", classmethod(counted))
    return built


def test_a_topic_is_described_once_per_version(monkeypatch) -> None:
    root = open_root(f"memory://reloads-{uuid.uuid4().hex}")
    root.create_topic("t", 2)
    built = _counting_descriptions(monkeypatch)
    first = root.describe_topic("t")
    assert root.describe_topic("t") is first and built == ["t"]
    handle = root.topic("t")
    assert handle.reload() is first and built == ["t"]
    root.alter_topic_config("t", {"retention.ms": 1000})
    changed = root.describe_topic("t")
    assert changed is not first and changed.config["retention.ms"] == 1000
    assert handle.reload() is changed


def test_an_idle_brokers_reload_pass_describes_no_topic(tmp_path, monkeypatch) -> None:
    url = f"file://{tmp_path}/root"
    root = open_root(url)
    for i in range(20):
        root.create_topic(f"t{i}", 2)
    with inproc_broker(url) as (server, _):
        broker = server.broker
        for i in range(20):  # every topic open in the broker
            broker.produce(f"t{i}", [(0, make_batch([b"x"]))])
        broker._reload_topics()  # whatever changed since the topics were opened
        built = _counting_descriptions(monkeypatch)
        broker._reload_topics()
        broker._reload_topics()
        assert built == []  # 20 descriptions a pass before
        open_root(url).alter_topic_config("t3", {"retention.ms": 5000})  # another process
        broker.state.root.metadata.refresh()
        built.clear()  # (the altering process described it too)
        broker._reload_topics()
        assert built == ["t3"]  # only the changed topic
        assert broker.state.topic("t3").info.config["retention.ms"] == 5000
