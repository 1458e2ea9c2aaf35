"""``TopicPartition``: the one name for "partition P of topic T", used by every layer.

It lives at the bottom of the package (beside ``errors``) so that storage, the
broker, the clients and the Spark source share one type without importing each
other. A NamedTuple, so ``("events", 0)`` compares and hashes equal to
``TopicPartition("events", 0)``, as in kafka-python.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
