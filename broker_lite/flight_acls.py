"""ACL checks of Flight calls (``authorizer = "acl"``), mapped to Kafka's operations.

Each Flight call is checked as the Kafka API that does the same thing is
(docs/security.md lists the mapping): a produce (DoPut) needs WRITE on its
topic, a fetch (DoGet) READ, ``create_topic`` CREATE on the cluster or the
topic, a group call READ on its group, and so on.  Listing calls leave out what
the principal may not describe, as Kafka's Metadata and ListGroups do.  The
principal is the Flight user (basic auth, ``flight_security_protocol`` SASL_*)
or ``User:ANONYMOUS``; the host is the caller's address.  Without an
authorizer every call is allowed, as on the Kafka listener, except that on a
broker where some listener authenticates User:ANONYMOUS never changes the
cluster (``acls.decide``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.flight as flight

from sparklog.protocol import actions
from sparklog.security.acls import ANONYMOUS, DENIED, decide

#: (operation, resource type, resource name) the caller must be allowed
Check = tuple[str, str, str]
CLUSTER = ("CLUSTER", "kafka-cluster")


def _commit(args: Mapping[str, Any]) -> list[Check]:
    topics = sorted({str(item[0]) for item in args.get("offsets") or [] if item})
    return [("READ", "GROUP", str(args["group"])), *(("READ", "TOPIC", t) for t in topics)]


def _delete_offsets(args: Mapping[str, Any]) -> list[Check]:
    topics = sorted({str(item[0]) for item in args.get("partitions") or [] if item})
    return [("DELETE", "GROUP", str(args["group"])), *(("READ", "TOPIC", t) for t in topics)]


def _metadata(args: Mapping[str, Any]) -> list[Check]:
    # asked by name: each must be describable; all topics: filtered (``filter_result``)
    return [("DESCRIBE", "TOPIC", str(t)) for t in args.get("topics") or []]


#: the rules an :class:`~sparklog.protocol.actions.Acl` of kind RULE names that are lists of
#: checks (``create_topic`` and ``init_producer_id``, one resource or another, are in
#: :func:`check_action`)
RULES: dict[str, Callable[[Mapping[str, Any]], list[Check]]] = {
    "metadata": _metadata,
    "commit_offsets": _commit,
    "delete_offsets": _delete_offsets,
}
#: the rules :func:`check_action` decides itself (allowed by one resource or another)
EITHER_RULES = frozenset({"create_topic", "init_producer_id"})


def required(acl: actions.Acl, args: Mapping[str, Any]) -> list[Check]:
    """What an action's ``acl`` needs of its parsed arguments ``args``; as Kafka's KafkaApis."""
    if acl.resource == actions.CLUSTER:
        return [(acl.operation, *CLUSTER)]
    if acl.resource in (actions.TOPIC, actions.GROUP):
        return [(acl.operation, acl.resource, str(args[acl.field]))]
    if acl.resource == actions.LISTED:
        return []  # the result is filtered (filter_result)
    if acl.resource == actions.RULE and acl.field in RULES:
        return RULES[acl.field](args)
    raise ValueError(f"no ACL rule for {acl}")


def knows(acl: actions.Acl) -> bool:
    """Whether this module can evaluate ``acl`` (the table's completeness test asks)."""
    if acl.resource == actions.RULE:
        return acl.field in RULES or acl.field in EITHER_RULES
    return acl.resource in (actions.CLUSTER, actions.TOPIC, actions.GROUP, actions.LISTED)


@dataclass(frozen=True)
class Caller:
    """Who makes a Flight call, the broker's settings and its ACLs at that moment."""

    principal: str
    host: str
    acls: tuple[Mapping[str, str], ...]
    config: Any

    def allowed(self, operation: str, resource_type: str, name: str) -> bool:
        return decide(
            self.config, self.acls, self.principal, self.host, operation, resource_type, name
        )

    def check(self, operation: str, resource_type: str, name: str) -> None:
        """Raise the resource type's authorisation error (Kafka's code) unless allowed."""
        if not self.allowed(operation, resource_type, name):
            refusal = DENIED[resource_type]
            raise refusal(
                f"{refusal.code}: {self.principal} may not "
                f"{operation.lower().replace('_', ' ')} {resource_type.lower().replace('_', ' ')} "
                f"{name!r} (no ACL allows it)"
            )

    def check_all(self, checks: Iterable[Check]) -> None:
        for check in checks:
            self.check(*check)


def caller(broker: Any, context: flight.ServerCallContext) -> Caller | None:
    """The call's :class:`Caller`, or None when nothing is checked: no authorizer, and the
    caller is a user or no listener of the broker authenticates (everything allowed)."""
    config = broker.config
    auth = context.get_middleware("auth")
    principal = getattr(auth, "principal", None) or ANONYMOUS
    acl = str(config.authorizer) == "acl"
    if not acl and not (config.authenticates and principal == ANONYMOUS):
        return None
    peer = context.peer()  # "ipv4:127.0.0.1:54321", "ipv6:[::1]:54321"
    host = peer.partition(":")[2].rpartition(":")[0].strip("[]") or "*"
    acls = tuple(broker.root.metadata.image().acls.values()) if acl else ()
    return Caller(principal, host, acls, config)


def check_action(
    who: Caller | None,
    action: actions.Action[Any],
    args: Mapping[str, Any],
    topic_names: Callable[[], Iterable[str]],
) -> None:
    """Refuse ``action`` with Kafka's authorisation code unless ``who`` may call it (its
    table entry's :class:`~sparklog.protocol.actions.Acl`)."""
    if who is None:
        return
    rule = action.acl.field if action.acl.resource == actions.RULE else ""
    if rule == "create_topic":  # Kafka: CREATE on the cluster, or on the topic
        topic = str(args["name"])
        if not who.allowed("CREATE", *CLUSTER):
            who.check("CREATE", "TOPIC", topic)
        return
    if rule == "init_producer_id":  # Kafka (KIP-679): IDEMPOTENT_WRITE, or WRITE on any topic
        if who.allowed("IDEMPOTENT_WRITE", *CLUSTER):
            return
        if not any(who.allowed("WRITE", "TOPIC", t) for t in topic_names()):
            who.check("IDEMPOTENT_WRITE", *CLUSTER)
        return
    who.check_all(required(action.acl, args))


def filter_result(who: Caller | None, name: str, args: Mapping[str, Any], result: Any) -> Any:
    """A listing action's ``result`` without what ``who`` may not describe."""
    if who is None:
        return result
    if name == "metadata" and not args.get("topics"):
        topics = result["topics"]
        kept = {t: v for t, v in topics.items() if who.allowed("DESCRIBE", "TOPIC", t)}
        return {**result, "topics": kept}
    if name == "list_topics":
        return [t for t in result if who.allowed("DESCRIBE", "TOPIC", str(t))]
    if name == "list_groups":
        return [g for g in result if who.allowed("DESCRIBE", "GROUP", str(g))]
    if name == "list_transactions":
        return {t: v for t, v in result.items() if who.allowed("DESCRIBE", "TRANSACTIONAL_ID", t)}
    if name == "fetch_offsets":
        return [row for row in result if who.allowed("DESCRIBE", "TOPIC", str(row[0]))]
    return result
