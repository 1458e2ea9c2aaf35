"""Per-principal caps on topics and partitions, so one tenant's topics cannot slow the others.

``max_topics_per_principal`` and ``max_partitions_per_principal`` (0: no cap, the
default, as Kafka has none; its CreateTopicPolicy is where such a rule plugs in).
A topic belongs to the principal whose request created it (``created_by`` in its
metadata record, written by the broker on every door: Kafka CreateTopics and
auto-creation, Flight's create_topic); its partitions count against that
principal, CreatePartitions included. Super users are not capped, nor topics
created without a principal (embedded use, the CLI on a root). A request that
would pass a cap is refused with POLICY_VIOLATION naming the key. The check reads
the metadata image when the request is handled: requests of one principal
running at the same moment may pass a cap by what they add together.
"""

from __future__ import annotations

from typing import Any

from sparklog.errors import PolicyViolationError
from sparklog.security.acls import super_users


def usage(image: Any, principal: str) -> tuple[int, int]:
    """(topics, partitions) the principal has created and not deleted."""
    topics = partitions = 0
    for doc in image.topics.values():
        if doc.get("created_by") == principal:
            topics += 1
            partitions += int(doc.get("partitions", 0))
    return topics, partitions


def check(config: Any, image: Any, principal: str | None, topics: int, partitions: int) -> None:
    """Refuse adding ``topics`` topics and ``partitions`` partitions for ``principal``."""
    max_topics = int(config.max_topics_per_principal)
    max_partitions = int(config.max_partitions_per_principal)
    if principal is None or not (max_topics or max_partitions):
        return
    if principal in super_users(config):
        return
    have_topics, have_partitions = usage(image, principal)
    if max_topics and have_topics + topics > max_topics:
        raise PolicyViolationError(
            f"{principal} may have at most {max_topics} topics (config key "
            f"'max_topics_per_principal'); it has {have_topics} and this request adds {topics}"
        )
    if max_partitions and have_partitions + partitions > max_partitions:
        raise PolicyViolationError(
            f"{principal} may have at most {max_partitions} partitions (config key "
            f"'max_partitions_per_principal'); it has {have_partitions} and this request adds "
            f"{partitions}"
        )
