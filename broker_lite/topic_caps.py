"""Per-principal caps on topics and partitions, so one tenant's topics cannot slow the others.

``max_topics_per_principal`` and ``max_partitions_per_principal`` (0: no cap, the
default, as Kafka has none; its CreateTopicPolicy is where such a rule plugs in).
A topic belongs to the principal whose request created it (``created_by`` in its
metadata record, written by the broker on every door: Kafka CreateTopics and
auto-creation, Flight's create_topic); its partitions count against that
principal, CreatePartitions included. Super users are not capped, nor topics
created without a principal (embedded use, the CLI on a root). A request that
would pass a cap is refused with POLICY_VIOLATION naming the key. The check runs
inside the metadata commit that adds the topic or the partitions
(:func:`on_create`, :func:`on_growth`: the catalog's ``admit``), on the image the
change is made to, and a commit that lost a race runs it again on the newer image:
requests of one principal at the same moment, on one broker or several, never
take it past a cap together.
"""

from __future__ import annotations

from collections.abc import Callable
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


def on_create(config: Any, principal: str | None, partitions: int) -> Callable[[Any], None] | None:
    """The catalog's ``admit`` for a topic of ``partitions`` created for ``principal``
    (None: nothing to check)."""
    if principal is None:
        return None
    return lambda image: check(config, image, principal, 1, partitions)


def on_growth(config: Any) -> Callable[[Any, dict[str, Any], dict[str, Any]], None]:
    """The catalog's ``admit`` for CreatePartitions: the partitions added count against
    the topic's creator, on the image they are added to."""

    def admit(image: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
        grown = int(after.get("partitions", 0)) - int(before.get("partitions", 0))
        check(config, image, before.get("created_by"), 0, grown)

    return admit
