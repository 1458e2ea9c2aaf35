"""Topic ids (Kafka's UUIDs of sparklog's topic incarnations) to names, for requests
that name topics by id (Fetch v13+).

A found id is remembered and checked against the topic's current id on each
use (a cached lookup), so a deleted and re-created topic's old id stops
resolving; an id not remembered is looked for among all topics once.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from sparklog.broker_lite.kafka import consumer_offsets
from sparklog.errors import SparklogError

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.context import BrokerView


_lock = threading.Lock()
_names: dict[uuid.UUID, str] = {}


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A sparklog topic id as Kafka's UUID (the zero UUID if it is not one)."""
    try:
        return uuid.UUID(hex=topic_id)
    except (ValueError, TypeError, AttributeError):
        return uuid.UUID(int=0)


def id_of(broker: BrokerView, name: str) -> uuid.UUID:
    """The Kafka topic id of ``name`` (the zero UUID if it has none)."""
    if consumer_offsets.is_topic(name):
        return consumer_offsets.TOPIC_ID
    try:
        return topic_uuid(broker.topic(name).info.topic_id)
    except SparklogError:
        return uuid.UUID(int=0)


def name_of(broker: BrokerView, topic_id: uuid.UUID) -> str | None:
    """The name of the live topic with ``topic_id``, or None."""
    if topic_id == consumer_offsets.TOPIC_ID:
        return consumer_offsets.TOPIC
    with _lock:
        known = _names.get(topic_id)
    if known is not None and id_of(broker, known) == topic_id:
        return known
    for name in broker.root.list_topics():
        if id_of(broker, name) == topic_id:
            with _lock:
                _names[topic_id] = name
            return str(name)
    return None
