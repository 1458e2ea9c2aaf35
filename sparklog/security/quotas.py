"""Kafka's client quotas in the cluster metadata log: ``client_quota`` records.

An entity is Kafka's: ``user`` and/or ``client-id``, each a name or the default
(``None``, Kafka's ``<default>``), or ``ip`` alone (KIP-612: an address or the
default IP), whose one quota is ``connection_creation_rate``, new Kafka
connections a second from that address.  The record's key is the entity's canonical
JSON (``[["client-id", null], ["user", "alice"]]``), its value
``{"entity": [...], "quotas": {"producer_byte_rate": 1048576.0, ...}}`` or null
once no quota is left.  :func:`resolve` picks, for each quota, the most
specific entity that sets it, in Kafka's order; :func:`ip_connection_rate` the
IP's own quota, else the default IP's.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.errors import InvalidRequestError
from sparklog.storage.cluster_metadata import ClusterMetadata, MetadataImage, Record

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
#: the quotas of an ``ip`` entity (Kafka's IP_CONNECTION_RATE_OVERRIDE_CONFIG)
IP_QUOTA_KEYS = ("connection_creation_rate",)
ENTITY_TYPES = ("user", "client-id", "ip")
Entity = list[tuple[str, str | None]]


def check_entity(entity: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity in canonical order; refused (naming it) unless Kafka accepts it: user
    and/or client-id, each once, or ip alone with an IP address (or the default)."""
    found = sorted((str(t), None if n is None else str(n)) for t, n in entity)
    types = [t for t, _ in found]
    if not found or len(set(types)) != len(types) or any(t not in ENTITY_TYPES for t in types):
        raise InvalidRequestError(
            f"quota entity {found!r} is not accepted; accepted: user and/or client-id, each "
            "once, or ip alone"
        )
    if "ip" in types and len(types) > 1:
        raise InvalidRequestError(
            f"quota entity {found!r} is not accepted: an ip entity cannot be combined with "
            "user or client-id"
        )
    if types == ["ip"] and found[0][1] is not None:
        try:
            ipaddress.ip_address(found[0][1])
        except ValueError:
            raise InvalidRequestError(
                f"quota entity ip {found[0][1]!r} is not accepted; accepted: an IP address "
                "(or the default ip)"
            ) from None
    return found


def is_ip(entity: Iterable[tuple[str, str | None]]) -> bool:
    return any(t == "ip" for t, _ in entity)


def check_quota_of(entity: Entity, key: str, value: float) -> float:
    """``value`` of quota ``key`` on ``entity`` (checked): an ip entity takes only
    ``connection_creation_rate``, a user or client-id entity only the others, as Kafka."""
    accepted = IP_QUOTA_KEYS if is_ip(entity) else QUOTA_KEYS
    if key not in accepted:
        kind = "an ip entity" if is_ip(entity) else "a user or client-id entity"
        raise InvalidRequestError(
            f"quota {key!r} is not accepted for {kind}; accepted: {', '.join(accepted)}"
        )
    if not value > 0:
        raise InvalidRequestError(f"quota {key} = {value} is not accepted; accepted: > 0")
    return float(value)


def entity_key(entity: Iterable[tuple[str, str | None]]) -> str:
    return json.dumps([list(p) for p in check_entity(entity)], separators=(",", ":"))


def alter(
    metadata: ClusterMetadata,
    entity: Iterable[tuple[str, str | None]],
    set_quotas: Mapping[str, float],
    remove: Iterable[str] = (),
) -> dict[str, float]:
    """Set and remove one entity's quotas (one commit); its quotas afterwards."""
    checked = check_entity(entity)
    changes = {k: check_quota_of(checked, k, v) for k, v in set_quotas.items()}
    removed = list(remove)
    for k in removed:
        check_quota_of(checked, k, 1)
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


def ip_connection_rate(image: MetadataImage, ip: str) -> float | None:
    """The ``connection_creation_rate`` applying to ``ip``: its own, else the default
    IP's (None: no quota), as Kafka's ConnectionQuotas resolves it."""
    for name in (ip, None):
        value = image.client_quotas.get(entity_key([("ip", name)]))
        if value is not None and "connection_creation_rate" in value["quotas"]:
            return float(value["quotas"]["connection_creation_rate"])
    return None


def describe_doc(entity: Entity, values: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON shape the CLI prints for one entity."""
    return {
        "entity": {t: ("<default>" if n is None else n) for t, n in entity},
        "quotas": dict(values),
    }
