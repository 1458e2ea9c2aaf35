"""The Flight wire format, defined once for the client and the broker (docs/architecture.md,
"Layers"), as Kafka's clients package owns its protocol: the broker and the client both import
it, it imports neither (only sparklog's ground modules: errors, topic_partition).

* :mod:`sparklog.protocol.flight`: actions, tickets, their bodies and replies, errors;
* :mod:`sparklog.protocol.hooks`: the narrow hooks a broker (or an embedded root) is handed
  to serve an application's actions, such as mirror links, without importing it.
"""
