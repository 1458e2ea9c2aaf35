"""Geo-replication: mirror links copy topics between roots with their offsets (docs/mirroring.md).

:mod:`~sparklog.mirror.links` keeps link definitions in the destination's metadata log,
:mod:`~sparklog.mirror.copier` copies from a sparklog root (segment objects, no decode),
:mod:`~sparklog.mirror.kafka_source` from a Kafka-protocol cluster (records, offsets kept).
"""
