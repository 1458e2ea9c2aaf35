"""Kafka's client quotas in the cluster metadata log: ``client_quota`` records.

An entity is Kafka's: ``user`` and/or ``client-id``, each a name or the default
(``None``, Kafka's ``<default>``).  The record's key is the entity's canonical
JSON (``[["client-id", null], ["user", "alice"]]``), its value
``{"entity": [...], "quotas": {"producer_byte_rate": 1048576.0, ...}}`` or null
once no quota is left.  :func:`resolve` picks, for each quota, the most
specific entity that sets it, in Kafka's order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.errors import InvalidRequestError
from sparklog.storage.cluster_metadata import ClusterMetadata, MetadataImage, Record

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
ENTITY_TYPES = ("user", "client-id")
Entity = list[tuple[str, str | None]]


def check_entity(entity: Iterable[tuple[str, str | None]]) -> Entity:
    found = sorted((str(t), None if n is None else str(n)) for t, n in entity)
    types = [t for t, _ in found]
    if not found or len(set(types)) != len(types) or any(t not in ENTITY_TYPES for t in types):
        raise InvalidRequestError(
            f"quota entity {found!r} is not accepted; accepted: user and/or client-id, each once"
        )
    return found


def entity_key(entity: Iterable[tuple[str, str | None]]) -> str:
    return json.dumps([list(p) for p in check_entity(entity)], separators=(",", ":"))


def check_quota(key: str, value: float) -> float:
    if key not in QUOTA_KEYS:
        raise InvalidRequestError(
            f"quota {key!r} is not accepted; accepted: {', '.join(QUOTA_KEYS)}"
        )
    if not value > 0:
        raise InvalidRequestError(f"quota {key} = {value} is not accepted; accepted: > 0")
    return float(value)


def alter(
    metadata: ClusterMetadata,
    entity: Iterable[tuple[str, str | None]],
    set_quotas: Mapping[str, float],
    remove: Iterable[str] = (),
) -> dict[str, float]:
    """Set and remove one entity's quotas (one commit); its quotas afterwards."""
    checked = check_entity(entity)
    changes = {k: check_quota(k, v) for k, v in set_quotas.items()}
    removed = list(remove)
    for k in removed:
        check_quota(k, 1)
    key = entity_key(checked)
    after: dict[str, float] = {}

    def build(image: MetadataImage) -> list[Record]:
        current = dict((image.client_quotas.get(key) or {}).get("quotas", {}))
        current.update(changes)
        for k in removed:
            current.pop(k, None)
        after.clear()
        after.update(current)
        value = {"entity": [list(p) for p in checked], "quotas": current} if current else None
        return [{"type": "client_quota", "key": key, "value": value}]

    metadata.append(build)
    return after


def entries(image: MetadataImage) -> list[tuple[Entity, dict[str, float]]]:
    return [
        ([(str(t), n) for t, n in value["entity"]], dict(value["quotas"]))
        for _, value in sorted(image.client_quotas.items())
    ]


def matches(entity: Entity, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    """Kafka's DescribeClientQuotas filter: (type, match_type 0 exact/1 default/2 any, name)."""
    names = dict(entity)
    for entity_type, match_type, match in components:
        if entity_type not in names:
            return False
        if match_type == 0 and names[entity_type] != match:
            return False
        if match_type == 1 and names[entity_type] is not None:
            return False
    return not strict or len(names) == len(components)


def resolve(image: MetadataImage, user: str, client_id: str) -> dict[str, float]:
    """The quotas applying to (user, client id): per quota, Kafka's most specific entity."""
    return {k: value for k, (value, _) in resolve_shared(image, user, client_id).items()}


def resolve_shared(
    image: MetadataImage, user: str, client_id: str
) -> dict[str, tuple[float, tuple[str, str]]]:
    """Per quota, its value and who shares it: the (user, client id) its usage is metered
    under, as Kafka's DefaultQuotaCallback tags it. A quota set on a user (or the default
    user) alone is shared by all that user's client ids (``(user, "")``); one set on a
    client id alone by all users of it (``("", client_id)``); the others per pair."""
    both, by_user, by_client = (user, client_id), (user, ""), ("", client_id)
    order: list[tuple[Entity, tuple[str, str]]] = [
        ([("client-id", client_id), ("user", user)], both),
        ([("client-id", None), ("user", user)], both),
        ([("user", user)], by_user),
        ([("client-id", client_id), ("user", None)], both),
        ([("client-id", None), ("user", None)], both),
        ([("user", None)], by_user),
        ([("client-id", client_id)], by_client),
        ([("client-id", None)], by_client),
    ]
    found: dict[str, tuple[float, tuple[str, str]]] = {}
    for entity, shared_by in order:
        value = image.client_quotas.get(entity_key(entity))
        if value is None:
            continue
        for k, v in value["quotas"].items():
            found.setdefault(k, (float(v), shared_by))
    return found


def describe_doc(entity: Entity, values: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON shape the CLI prints for one entity."""
    return {
        "entity": {t: ("<default>" if n is None else n) for t, n in entity},
        "quotas": dict(values),
    }
