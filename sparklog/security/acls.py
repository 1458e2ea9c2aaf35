"""Kafka's ACL model: bindings, filters and the authoriser's decision (docs/security.md).

A binding is Kafka's: resource type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID),
pattern type (LITERAL, with ``*`` for every name, or PREFIXED), resource name,
principal (``User:NAME`` or ``User:*``), host (``*`` or an IP), operation
and permission (ALLOW or DENY).  Bindings are ``acl`` records of the cluster
metadata log: key the binding's canonical JSON, value the binding (null
deletes it).  A check follows Kafka's ``AclAuthorizer``: super users are
allowed; a matching DENY wins; a resource no binding names is allowed only
with ``allow_everyone_if_no_acl_found``; else a matching ALLOW is needed, where
READ, WRITE, DELETE or ALTER imply DESCRIBE and ALTER_CONFIGS implies
DESCRIBE_CONFIGS.  The broker checks requests with it
(:mod:`sparklog.broker_lite.kafka.acl`); ``sparklog acls`` writes bindings on a root.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from sparklog.storage.cluster_metadata import MetadataImage, Record

ANONYMOUS = "User:ANONYMOUS"
CLUSTER_NAME = "kafka-cluster"

#: Kafka's numbers (org.apache.kafka.common.resource / acl)
RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
BY_NUMBER = {
    "resource_type": {v: k for k, v in RESOURCE_TYPES.items()},
    "pattern_type": {v: k for k, v in PATTERN_TYPES.items()},
    "operation": {v: k for k, v in OPERATIONS.items()},
    "permission": {v: k for k, v in PERMISSIONS.items()},
}
#: the error of a refused check, per resource type
DENIED: dict[str, type[AuthorizationError]] = {
    "TOPIC": TopicAuthorizationFailedError,
    "GROUP": GroupAuthorizationFailedError,
    "CLUSTER": ClusterAuthorizationFailedError,
    "TRANSACTIONAL_ID": TransactionalIdAuthorizationFailedError,
}
CLUSTER_DENIED = ClusterAuthorizationFailedError
#: operations an ALLOW of the key's operation grants too
IMPLIED = {
    "DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"},
    "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"},
}
#: operations on the cluster that change it: users' credentials, ACLs, quotas, mirror links,
#: other producers' transactions.  A broker that authenticates anyone never grants them to
#: User:ANONYMOUS by default (:func:`decide`): only a binding that names it (or User:*) does.
CLUSTER_CHANGES = frozenset({"ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "ALL"})
FIELDS = ("resource_type", "pattern_type", "name", "principal", "host", "operation", "permission")


def binding(
    resource_type: str,
    name: str,
    principal: str,
    operation: str,
    permission: str = "ALLOW",
    pattern_type: str = "LITERAL",
    host: str = "*",
) -> dict[str, str]:
    """A checked binding (the ``acl`` record's value)."""
    out = {
        "resource_type": resource_type.upper(),
        "pattern_type": pattern_type.upper(),
        "name": name,
        "principal": principal,
        "host": host,
        "operation": operation.upper(),
        "permission": permission.upper(),
    }
    for key, table in (
        ("resource_type", RESOURCE_TYPES),
        ("pattern_type", PATTERN_TYPES),
        ("operation", OPERATIONS),
        ("permission", PERMISSIONS),
    ):
        if out[key] not in table or out[key] in ("ANY", "MATCH"):
            accepted = ", ".join(k for k in table if k not in ("ANY", "MATCH"))
            raise InvalidRequestError(
                f"ACL {key} {out[key]!r} is not accepted; accepted: {accepted}"
            )
    if not principal.startswith("User:") or principal == "User:":
        raise InvalidRequestError(
            f"ACL principal {principal[:100]!r} is not accepted; accepted: User:NAME or User:*"
        )
    if not name:
        raise InvalidRequestError("an ACL needs a resource name")
    if out["resource_type"] == "CLUSTER" and name != CLUSTER_NAME:
        raise InvalidRequestError(f"the cluster resource is named {CLUSTER_NAME!r}")
    return out


def key(value: Mapping[str, str]) -> str:
    return json.dumps({f: value[f] for f in FIELDS}, sort_keys=True, separators=(",", ":"))


def matches_filter(value: Mapping[str, str], flt: Mapping[str, Any]) -> bool:
    """Kafka's AclBindingFilter: None/"ANY" matches anything; MATCH matches what applies."""
    for f in ("resource_type", "operation", "permission"):
        want = flt.get(f)
        if want not in (None, "ANY") and value[f] != want:
            return False
    for f in ("principal", "host"):
        want = flt.get(f)
        if want is not None and value[f] != want:
            return False
    pattern = flt.get("pattern_type") or "ANY"
    name = flt.get("name")
    if pattern == "MATCH":
        return name is None or _applies(value, name)
    if pattern != "ANY" and value["pattern_type"] != pattern:
        return False
    return name is None or value["name"] == name


def _applies(value: Mapping[str, str], name: str) -> bool:
    if value["pattern_type"] == "LITERAL":
        return value["name"] in (name, "*")
    return name.startswith(value["name"])


def super_users(config: Any) -> set[str]:
    return {p.strip() for p in str(config.super_users).split(";") if p.strip()}


def anonymous_change(principal: str, operation: str, resource_type: str) -> bool:
    """User:ANONYMOUS asks to change the cluster (:data:`CLUSTER_CHANGES`)."""
    return principal == ANONYMOUS and resource_type == "CLUSTER" and operation in CLUSTER_CHANGES


def decide(
    config: Any,
    acls: Iterable[Mapping[str, str]],
    principal: str,
    host: str,
    operation: str,
    resource_type: str,
    name: str,
) -> bool:
    """The broker's decision on every listener (one door).

    With ``authorizer = "acl"``, Kafka's AclAuthorizer: super users are allowed, a
    matching DENY wins, a resource no binding names is open with
    ``allow_everyone_if_no_acl_found``, else a matching ALLOW is needed.  Without
    one, everything is allowed.  On a broker where some listener authenticates
    (``config.authenticates``), User:ANONYMOUS changes the cluster
    (:data:`CLUSTER_CHANGES`) only by a binding naming it, never through
    ``allow_everyone_if_no_acl_found`` or the absence of an authorizer.
    """
    refused_anonymous = bool(config.authenticates) and anonymous_change(
        principal, operation, resource_type
    )
    if str(config.authorizer) != "acl":
        return not refused_anonymous
    if principal in super_users(config):
        return True
    found = [a for a in acls if a["resource_type"] == resource_type and _applies(a, name)]
    if not found:
        return bool(config.allow_everyone_if_no_acl_found) and not refused_anonymous

    def mine(a: Mapping[str, str]) -> bool:
        return a["principal"] in (principal, "User:*") and a["host"] in (host, "*")

    for a in found:
        if a["permission"] == "DENY" and mine(a) and a["operation"] in (operation, "ALL"):
            return False
    grants = {operation, "ALL", *IMPLIED.get(operation, ())}
    return any(a["permission"] == "ALLOW" and mine(a) and a["operation"] in grants for a in found)


def create(metadata: Any, bindings: list[dict[str, str]]) -> None:
    """Write ``bindings`` (one commit; an existing one is written again unchanged)."""
    records: list[Record] = [{"type": "acl", "key": key(b), "value": b} for b in bindings]
    if records:
        metadata.append(lambda image: records)


def delete(metadata: Any, filters: list[dict[str, Any]]) -> list[list[dict[str, str]]]:
    """Delete the bindings each filter matches (one commit); the deleted ones per filter."""
    matched: list[list[dict[str, str]]] = []

    def build(image: MetadataImage) -> list[Record]:
        matched.clear()
        keys: set[str] = set()
        for flt in filters:
            found = [dict(v) for v in image.acls.values() if matches_filter(v, flt)]
            matched.append(found)
            keys.update(key(v) for v in found)
        return [{"type": "acl", "key": k, "value": None} for k in sorted(keys)]

    metadata.append(build)
    return matched
