"""Admin: topics (create, delete, list, describe, alter, grow) and groups (lag, reset, delete)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.client.transports import Backend, open_backend
from sparklog.client.types import (
    GroupDescription,
    MemberDescription,
    OffsetAndMetadata,
    PartitionLag,
    TopicDescription,
    TopicPartition,
)
from sparklog.errors import ConfigError, GroupError, UnknownTopicError


@dataclass(frozen=True)
class OffsetReset:
    """One line of a reset plan: a partition's committed offset now and after the reset."""

    topic: str
    partition: int
    current: int | None
    new: int


class Admin:
    """Manage topics and consumer groups at one address (storage root or brokers)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        backend: Backend | None = None,
        retry_timeout_ms: int | None = None,
    ) -> None:
        self._backend = backend or open_backend(
            address, storage_options, retry_timeout_ms=retry_timeout_ms
        )
        self._owns_backend = backend is None

    def close(self) -> None:
        if self._owns_backend:
            self._backend.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- topics -----------------------------------------------------------------
    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None
    ) -> TopicDescription:
        self._backend.create_topic(name, partitions, dict(config or {}))
        return self._backend.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self._backend.delete_topic(name)

    def list_topics(self) -> list[str]:
        return sorted(self._backend.list_topics())

    def describe_topic(self, name: str, *, sizes: bool = True) -> TopicDescription:
        return self._backend.describe_topic(name, sizes=sizes)

    def alter_topic_config(self, name: str, updates: Mapping[str, Any]) -> TopicDescription:
        if not updates:
            raise ConfigError("no config given; accepted: one or more key=value pairs")
        self._backend.alter_topic_config(name, dict(updates))
        return self._backend.describe_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        self._backend.add_partitions(name, total)
        return self._backend.describe_topic(name)

    def list_offsets(self, topic: str, spec: str | int = "latest") -> dict[int, int]:
        """Per partition: the earliest / latest offset, or the first at or after a ms timestamp."""
        count = self._backend.topic_layout(topic)[0]
        return {p: self._backend.list_offsets(topic, p, spec) for p in range(count)}

    # -- groups -------------------------------------------------------------------
    def list_groups(self) -> list[str]:
        return sorted(self._backend.list_groups())

    def describe_group(self, group: str) -> GroupDescription:
        """State, members and per-partition lag (committed offset vs high watermark)."""
        info = self._backend.describe_group(group)
        committed = self._backend.fetch_offsets(group)
        members = [
            MemberDescription(
                m["member_id"],
                list(m.get("topics", [])),
                [TopicPartition(t, int(p)) for t, p in m.get("assignment", [])],
            )
            for m in info.get("members", [])
        ]
        unknown = not members and not committed and info.get("generation", 0) <= 0
        if unknown and group not in self._backend.list_groups():
            raise GroupError(f"unknown group {group!r}")
        owner = {tp: m.member_id for m in members for tp in m.assignment}
        topics = sorted({t for t, _ in committed} | {tp.topic for tp in owner})
        lag = []
        for topic in topics:
            try:
                described = self._backend.describe_topic(topic)
            except UnknownTopicError:
                continue
            for part in described.partitions:
                tp = TopicPartition(topic, part.partition)
                found = committed.get((topic, part.partition))
                if found is None and tp not in owner:
                    continue
                lag.append(
                    PartitionLag(
                        topic,
                        part.partition,
                        None if found is None else found.offset,
                        part.high_watermark,
                        part.log_start_offset,
                        owner.get(tp),
                    )
                )
        return GroupDescription(
            group,
            info.get("state", "Empty"),
            int(info.get("generation", 0)),
            info.get("strategy", ""),
            members,
            lag,
        )

    def reset_group_offsets(
        self,
        group: str,
        topic: str,
        *,
        to_earliest: bool = False,
        to_latest: bool = False,
        to_offset: int | None = None,
        to_timestamp_ms: int | None = None,
        shift_by: int | None = None,
        partitions: Iterable[int] | None = None,
        execute: bool = False,
    ) -> list[OffsetReset]:
        """Plan (and with ``execute`` apply) new committed offsets, like kafka-consumer-groups.sh.

        Exactly one of the ``to_*`` / ``shift_by`` choices; targets are clamped to
        ``[log_start_offset, high_watermark]``.  Executing needs the group to have
        no active members, so nobody overwrites the reset.
        """
        chosen = [
            n
            for n, v in (
                ("to_earliest", to_earliest),
                ("to_latest", to_latest),
                ("to_offset", to_offset is not None),
                ("to_datetime", to_timestamp_ms is not None),
                ("shift_by", shift_by is not None),
            )
            if v
        ]
        if len(chosen) != 1:
            raise ConfigError(
                f"choose exactly one reset ({', '.join(chosen) or 'none given'}); accepted: "
                "to-earliest, to-latest, to-offset, to-datetime, shift-by"
            )
        described = self._backend.describe_topic(topic)
        wanted = set(partitions) if partitions is not None else None
        committed = self._backend.fetch_offsets(group)
        plan = []
        for part in described.partitions:
            if wanted is not None and part.partition not in wanted:
                continue
            current = committed.get((topic, part.partition))
            now = None if current is None else current.offset
            if to_earliest:
                target = part.log_start_offset
            elif to_latest:
                target = part.high_watermark
            elif to_offset is not None:
                target = to_offset
            elif to_timestamp_ms is not None:
                target = self._backend.list_offsets(topic, part.partition, to_timestamp_ms)
            else:
                assert shift_by is not None
                base = now if now is not None else part.log_start_offset
                target = base + shift_by
            target = min(max(target, part.log_start_offset), part.high_watermark)
            plan.append(OffsetReset(topic, part.partition, now, target))
        if wanted is not None:
            unknown = wanted - {p.partition for p in described.partitions}
            if unknown:
                raise UnknownTopicError(
                    f"topic {topic!r} has no partition {min(unknown)}; accepted: 0-"
                    f"{len(described.partitions) - 1}"
                )
        if execute and plan:
            info = self._backend.describe_group(group)
            if info.get("members"):
                raise GroupError(
                    f"group {group!r} has {len(info['members'])} active member(s); stop its "
                    "consumers before resetting offsets"
                )
            self._backend.commit_offsets(
                group,
                -1,
                "",
                {(r.topic, r.partition): OffsetAndMetadata(r.new, "reset") for r in plan},
            )
        return plan

    def delete_group(self, group: str) -> None:
        self._backend.delete_group(group)
