"""Find damaged and missing files in a root's logs, for ``sparklog log check``.

A broker that meets a damaged commit reports it and refuses that shard; an
operator needs the whole picture first: every damaged or missing commit and
snapshot of the shard logs, group logs and the cluster metadata log, and every
segment object a log references that is gone.  The check only reads (one LIST
per log folder, one GET per file) and never repairs; it reads every file, where
a broker reads forward from the newest snapshot, so damage below it is found too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sparklog.errors import CorruptRecordError, SparklogError
from sparklog.storage.catalog import LogRoot
from sparklog.storage.documents import version_key
from sparklog.storage.log import ShardLog
from sparklog.storage.metalog import (
    INDEXED_SNAPSHOT_MAGIC,
    IndexedSnapshot,
    MetaLog,
    decode_commit,
    decode_snapshot,
)
from sparklog.storage.shard_codec import ShardState
from sparklog.storage.topics import Topic


@dataclass(frozen=True)
class Finding:
    """One damaged or missing file: which log, which file, what is wrong with it."""

    log: str
    file: str
    problem: str


@dataclass
class CheckReport:
    findings: list[Finding]
    files_checked: int = 0
    logs_checked: int = 0


def check_log(log: MetaLog, name: str) -> tuple[list[Finding], int]:
    """Every commit and snapshot file of ``log``: damaged ones, and versions missing
    between its oldest and newest commit; and how many files were read."""
    names = log.store.list_names(log.prefix)
    commits = sorted(versions_in(names, ".json"))
    snapshots = sorted(versions_in(names, ".snapshot"))
    findings: list[Finding] = []
    checked = 0
    for version in commits:
        checked += _check_file(log, name, log.key(version), _commit_check, findings)
    for version in snapshots:
        checked += _check_file(log, name, log.key(version, ".snapshot"), _snapshot_check, findings)
    if commits:
        present = set(commits)
        for version in range(commits[0], commits[-1] + 1):
            if version not in present:
                findings.append(
                    Finding(name, log.where(log.key(version)), "missing: later versions exist")
                )
    return findings, checked


def versions_in(names: list[str], suffix: str) -> Iterator[int]:
    """The versions of the files named ``<version><suffix>`` among ``names``."""
    for n in names:
        stem = n[: -len(suffix)] if n.endswith(suffix) else ""
        if stem.isdigit():
            yield int(stem)


def _commit_check(log: MetaLog, key: str, raw: bytes) -> None:
    decode_commit(raw, log.where(key))


def _snapshot_check(log: MetaLog, key: str, raw: bytes) -> None:
    where = log.where(key)
    if not raw.endswith(INDEXED_SNAPSHOT_MAGIC):
        decode_snapshot(raw, where)
        return
    snapshot = IndexedSnapshot(log.store, key, where, raw, len(raw), lambda: None)
    try:
        for part in (snapshot.header.get("parts") or {}).values():
            chunks = part.get("chunks") or {}
            for ref in zip(
                chunks.get("start", []), chunks.get("end", []), chunks.get("xxh3", []), strict=True
            ):
                snapshot.read(list(ref))  # each chunk's own checksum
    except (AttributeError, TypeError, ValueError) as exc:  # a sound checksum, a bad shape
        raise CorruptRecordError(f"snapshot {where} header is not a snapshot's: {exc}") from None


def problem_in(log: MetaLog[Any], key: str, *, snapshot: bool) -> str | None:
    """What is wrong with one commit or snapshot file: None if sound, else the problem
    ("missing" if absent)."""
    raw = log.store.get_or_none(key)
    if raw is None:
        return "missing"
    try:
        (_snapshot_check if snapshot else _commit_check)(log, key, bytes(raw))
    except CorruptRecordError as exc:
        return problem_of(exc)
    return None


def _check_file(
    log: MetaLog,
    name: str,
    key: str,
    check: Callable[[MetaLog, str, bytes], None],
    findings: list[Finding],
) -> int:
    raw = log.store.get_or_none(key)
    if raw is None:  # pruned between the listing and the read
        return 0
    try:
        check(log, key, bytes(raw))
    except CorruptRecordError as exc:
        findings.append(Finding(name, log.where(key), problem_of(exc)))
    return 1


def problem_of(exc: SparklogError) -> str:
    """The part of a damage error that says what is wrong (the file is named apart)."""
    text = str(exc)
    for lead in ("is damaged: ", "fails", "cannot be", "holds", "is not"):
        at = text.find(lead)
        if at >= 0:
            return text[at:].removeprefix("is damaged: ")
    return text


def check_topic(topic: Topic) -> tuple[list[Finding], int, int]:
    """Findings in every shard log of ``topic`` and its missing segment objects;
    (findings, files read, logs checked)."""
    findings: list[Finding] = []
    checked = 0
    referenced: dict[str, str] = {}
    for s in range(topic.shards):
        name = f"topic {topic.name!r} shard {s}"
        shard = topic.open_shard(s)
        found, read = check_log(shard, name)
        findings.extend(found)
        checked += read
        if found:
            continue  # its state cannot be trusted to name its objects
        state, problem, _ = read_shard(shard)
        if state is None:  # a damaged journal version: named by check_journals too
            findings.append(Finding(name, shard.where(shard.prefix), problem))
            continue
        for part in state.parts.values():
            for seg in part.segments.all():
                referenced.setdefault(seg.object_key, name)
    if referenced:
        present = {o.key for o in topic.store.list_objects("objects")}
        for key, name in sorted(referenced.items()):
            store, where = topic.store.locate(key)  # a shared object is below the root
            if where not in present if store is topic.store else not store.exists(where):
                findings.append(
                    Finding(name, f"{store.url}/{where}", "missing: a live segment's object")
                )
    return findings, checked, topic.shards


def read_shard(shard: ShardLog) -> tuple[ShardState | None, str, str | None]:
    """A sound shard log's state (the log, then a leased journal's tail), or None, why it
    cannot be read and the leased journal to repair (``BROKER/ID``) if the damage is there
    (the problem then names `log recover --journal`)."""
    try:
        return shard.refresh(), "", None
    except CorruptRecordError as exc:
        leased = MetaLog._load(shard).journal  # the log alone names the journal
        problem = problem_of(exc)
        if leased is None:
            return None, problem, None
        journal = f"{leased.broker}/{leased.journal}"
        return (
            None,
            f"its leased journal is damaged ({problem}); repair it with "
            f"`sparklog log recover --journal {journal}`",
            journal,
        )


def check_root(root: LogRoot, topics: list[str] | None = None) -> CheckReport:
    """Check the named topics, or (``None``) every topic, every group and the metadata log."""
    report = CheckReport([])
    names = root.list_topics() if topics is None else topics
    for name in names:
        found, read, logs = check_topic(root.topic(name))
        report.findings.extend(found)
        report.files_checked += read
        report.logs_checked += logs
    if topics is None:
        for group in root.groups.list_groups():
            log, lock = root.groups.log(group)
            with lock:
                found, read = check_log(log, f"group {group!r}")
            report.findings.extend(found)
            report.files_checked += read
            report.logs_checked += 1
        found, read = check_log(root.metadata.log, "cluster metadata")
        report.findings.extend(found)
        report.files_checked += read
        report.logs_checked += 1
        found, read, journals = check_journals(root)
        report.findings.extend(found)
        report.files_checked += read
        report.logs_checked += journals
    return report


def check_journals(root: LogRoot) -> tuple[list[Finding], int, int]:
    """Every version of every broker journal (format 3) under ``cluster/journal``:
    damaged ones and versions missing between a journal's first and last; (findings,
    files read, journals checked).  A journal is deleted whole once folded, so a
    journal's first version may be any; a hole after it is damage."""
    versions: dict[str, list[int]] = {}
    for info in root.store.list_objects("cluster/journal"):
        folder, _, file = info.key.rpartition("/")
        stem = file.removesuffix(".json")
        if file.endswith(".json") and stem.isdigit():
            versions.setdefault(folder, []).append(int(stem))
    findings: list[Finding] = []
    checked = 0
    for folder, found in sorted(versions.items()):
        name = f"journal {folder.removeprefix('cluster/journal/')}"
        found.sort()
        for version in found:
            key = version_key(folder, version)
            raw = root.store.get_or_none(key)
            if raw is None:  # deleted (folded) between the listing and the read
                continue
            checked += 1
            try:
                decode_commit(bytes(raw), f"{root.store.url}/{key}")
            except CorruptRecordError as exc:
                findings.append(Finding(name, f"{root.store.url}/{key}", problem_of(exc)))
        present = set(found)
        for version in range(found[0], found[-1] + 1):
            if version not in present:
                where = f"{root.store.url}/{version_key(folder, version)}"
                findings.append(Finding(name, where, "missing: later versions exist"))
    return findings, checked, len(versions)
