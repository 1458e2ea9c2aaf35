"""Kafka's ``auto.create.topics.enable``: a topic named by a Produce or Metadata request.

Kafka (default on) creates a missing topic with the broker's ``num.partitions``
when a Metadata request that allows auto-creation names it, and clients that
produce first ask for metadata; without it librdkafka waits its whole delivery
timeout for a topic nobody creates.  The broker keys
``auto_create_topics_enable`` and ``num_partitions`` (broker_lite/config.py)
play Kafka's part; the creation is an ordinary ``create_topic`` (an append to
the cluster metadata log), so two brokers racing create it once.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sparklog.errors import SparklogError, TopicAlreadyExistsError
from sparklog.storage.catalog import validate_topic_name

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.context import BrokerView


#: Kafka's internal topics: never auto-created as ordinary topics (``__consumer_offsets``
#: is served as a read-only view of the group logs by
#: :mod:`~sparklog.broker_lite.kafka.consumer_offsets`; ``__transaction_state`` is unknown)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def enabled(broker: BrokerView) -> bool:
    return bool(getattr(broker.config, "auto_create_topics_enable", False))


def create_missing(
    broker: BrokerView, names: list[str], known: set[str], principal: str | None = None
) -> set[str]:
    """Create those of ``names`` not in ``known`` (invalid names are left for the
    caller to answer with their error); the names now known. ``principal``: the
    requester, whose per-principal caps apply (broker_lite/topic_caps.py)."""
    if not enabled(broker):
        return known
    now_known = set(known)
    for name in names:
        if name in now_known or name in INTERNAL_TOPICS:
            continue
        try:
            validate_topic_name(name)
        except SparklogError:
            continue
        with contextlib.suppress(TopicAlreadyExistsError):  # another broker created it first
            broker.create_topic(name, int(broker.config.num_partitions), {}, created_by=principal)
        now_known.add(name)
    return now_known
