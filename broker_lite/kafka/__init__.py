"""Kafka's wire protocol on every broker (DESIGN.md §4).

``server`` frames requests and dispatches them; ``versions`` is the table of
APIs and the versions each implements (what ApiVersions advertises); ``records``
is the record batch v2 codec; one handler module per API group (``metadata``,
``produce``, ``fetch``, ``offsets``, ``groups``, ``admin``) turns kio's decoded
requests into calls on :class:`~sparklog.broker_lite.service.Broker`.
"""
