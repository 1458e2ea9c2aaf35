"""A Faust application with two tables backed by changelog topics, run by
tests/kafka/test_compat_faust.py in its own venv (tests/kafka/apps/faust-requirements.txt).

It reads records keyed by a short key with the record's number as its value, and keeps two
tables in memory (``store="memory://"``), so a restarted instance has nothing but what it
rebuilds from their changelog topics:

- ``seen``: record number -> key, one entry per record; idempotent, so at_least_once's
  replay of what came after the last offset commit changes nothing;
- ``counts``: key -> records of that key; exact only under exactly_once.

Every half second it writes both tables, its source partitions' positions and whether its
table recovery has finished to DUMP as JSON (a whole file, replaced), which the test reads.
The static member id lets a restarted instance take the killed member's partitions without
waiting out its session.

Usage: python faust_table.py BOOTSTRAP SOURCE APP_ID DATA_DIR GUARANTEE DUMP FIX [SEEK_WAIT_S]
(FIX: exactly-once-fixed, or as-released; SEEK_WAIT_S, if above 0: see
``seek_after_an_event``)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys

import faust

#: how often the tables are written to DUMP
DUMP_INTERVAL_S = 0.5
PARTITIONS = 2


#: held by the agent while it handles one event and by every offset commit (the fix)
EVENT_OR_COMMIT = asyncio.Lock()
#: set once the agent has handled an event (``seek_after_an_event``)
HANDLED = asyncio.Event()


def fix_exactly_once() -> None:
    """The fixes this app applies to Faust 0.15.3's exactly_once: each transaction commits
    the offsets of exactly the events whose table writes it holds, the recovery learns
    each changelog's end, and the agent gets no record fetched before the seek that ends a
    recovery (docs/broker.md, "Faust's exactly_once").

    As released, Faust's commit runs beside its agents: it takes the acked offsets, then
    (awaiting TxnOffsetCommit and EndTxn) the agents go on handling events, and their table
    writes, queued in Faust's own ProducerBuffer (``send_soon``), reach the transactional
    producer whenever that buffer drains. So a transaction can commit an event's offset
    while its changelog write is still queued (the write lands in the next transaction;
    killed before that one commits, the update is lost: the table is short), or carry the
    write of an event whose offset it does not commit (after a kill the event is handled
    again: counted twice). Here an offset commit waits for the event being handled, drains
    Faust's buffer, and commits; the agent acks each event before it lets a commit run.
    Its recovery asks the brokers for a changelog's end no Fetch has told it yet. And
    the source partitions stay held back until the seek to their committed offsets that
    ends a recovery is done (as released, records fetched before that seek can reach the
    agent, and then the last one read is handled twice).
    """
    from faust.transport.consumer import Consumer

    force_commit = Consumer.force_commit

    async def commit_alone(self, topics=None, start_new_transaction=True):  # type: ignore[no-untyped-def]
        async with EVENT_OR_COMMIT:
            await self.app.producer.flush()
            return await force_commit(self, topics, start_new_transaction=start_new_transaction)

    Consumer.force_commit = commit_alone  # type: ignore[method-assign]

    # Faust's exactly_once recovery takes each changelog's end from aiokafka's
    # last_stable_offset, which is None until a Fetch of that partition has been answered:
    # right after an assignment Faust reads that as -1 (an empty changelog) and skips the
    # recovery, so the table starts empty. Ask the brokers (ListOffsets, read_committed)
    # for the partitions no Fetch has answered yet.
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    highwaters = AIOKafkaConsumerThread._highwaters

    async def highwaters_asked(self, partitions):  # type: ignore[no-untyped-def]
        found = dict(await highwaters(self, partitions))
        unknown = [tp for tp, offset in found.items() if offset is None]
        if unknown:
            found.update(await self._ensure_consumer().end_offsets(unknown))
        return found

    AIOKafkaConsumerThread._highwaters = highwaters_asked  # type: ignore[method-assign]

    # When a recovery ends (Recovery.on_recovery_completed, or _resume_streams), Faust
    # resumes the stream partitions and only then seeks them to their committed offsets,
    # while its fetcher runs: records aiokafka fetched at the old position (a restart's
    # first Fetch, made before Faust held the partitions back for the recovery, stays in
    # aiokafka's buffer through it) can reach the agent before the seek. The seek fetches
    # them again, and Faust's reader takes again the one at the offset it last read
    # (``offset >= r_offset`` in Consumer._drain_messages): that record is handled twice.
    # Hold the stream partitions back until the seek is done.
    from faust.tables.recovery import Recovery

    resume_partitions = Consumer.resume_partitions
    perform_seek = Consumer.perform_seek

    def release_streams(consumer):  # type: ignore[no-untyped-def]
        held, consumer._streams_held = getattr(consumer, "_streams_held", None), None
        if held:
            resume_partitions(consumer, held)

    def resume_after_seek(self, tps):  # type: ignore[no-untyped-def]
        tps = set(tps)
        held = getattr(self, "_streams_held", None)
        if held is not None:  # a recovery is ending: stream partitions wait for the seek
            streams = {tp for tp in tps if not self._is_changelog_tp(tp)}
            held.update(streams)
            tps -= streams
        resume_partitions(self, tps)

    async def seek_then_resume(self):  # type: ignore[no-untyped-def]
        try:
            await perform_seek(self)
        finally:
            release_streams(self)

    Consumer.resume_partitions = resume_after_seek  # type: ignore[method-assign]
    Consumer.perform_seek = seek_then_resume  # type: ignore[method-assign]

    def streams_after_seek(ending):  # type: ignore[no-untyped-def]
        async def end(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.app.consumer._streams_held = set()
            try:
                return await ending(self, *args, **kwargs)
            finally:  # a recovery ending without a seek (a new rebalance) holds nothing
                release_streams(self.app.consumer)

        return end

    Recovery.on_recovery_completed = streams_after_seek(  # type: ignore[method-assign]
        Recovery.on_recovery_completed
    )
    Recovery._resume_streams = streams_after_seek(  # type: ignore[method-assign]
        Recovery._resume_streams
    )
    shorten_recovery_waits()


#: the wait for a changelog record of Faust's recovery (5 s as released)
RECOVERY_WAIT_S = 0.5


def shorten_recovery_waits() -> None:
    """Faust ends an exactly_once recovery whose changelog ends in a transaction marker
    (the last stable offset minus one, which Faust takes as its last record, is the marker:
    no record comes for it) only after two empty waits of 5 s for a record, when it looks
    for an aborted transaction; here the wait is 0.5 s (a timing, not a behaviour: a test's
    changelogs hold a few thousand records, read in well under that), which saves the
    suite about 9 s per restart. The same happens against Kafka."""
    import asyncio
    import types

    import faust.tables.recovery as recovery

    class ShortWaits(types.ModuleType):
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(asyncio, name)

    async def wait_for(awaitable, timeout):  # type: ignore[no-untyped-def]
        return await asyncio.wait_for(awaitable, RECOVERY_WAIT_S if timeout == 5.0 else timeout)

    short = ShortWaits("asyncio")
    short.wait_for = wait_for  # type: ignore[attr-defined]
    recovery.asyncio = short  # type: ignore[attr-defined]


def seek_after_an_event(most_s: float) -> None:
    """Make the seek to the committed offsets that ends a recovery wait until the agent has
    handled an event (at most ``most_s``): Faust as released resumes its source partitions
    before that seek, so records fetched before it can reach the agent, and one of them is
    then handled twice (see ``fix_exactly_once``). Unforced, that order is taken in about
    one restart in ten (its window is the seek's few OffsetFetch round trips); forced, in
    every one where the fix is not applied. With the fix the source partitions are held
    back until the seek is done, so no event can come first: the seek goes ahead at once."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    seek_to_committed = AIOKafkaConsumerThread.seek_to_committed

    async def seek_later(self):  # type: ignore[no-untyped-def]
        if not getattr(self.consumer, "_streams_held", None):  # the fix holds none back
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(HANDLED.wait(), most_s)
        return await seek_to_committed(self)

    AIOKafkaConsumerThread.seek_to_committed = seek_later  # type: ignore[method-assign]


def main() -> None:
    bootstrap, source, app_id, data_dir, guarantee, dump, fix = sys.argv[1:8]
    seek_wait_s = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    if seek_wait_s:
        seek_after_an_event(seek_wait_s)
    if fix == "exactly-once-fixed":
        fix_exactly_once()
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=data_dir,
        web_enabled=False,
        processing_guarantee=guarantee,
        topic_partitions=PARTITIONS,
        topic_replication_factor=1,
        broker_commit_interval=0.5,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=0.5,
        consumer_group_instance_id=f"{app_id}-member",
        consumer_auto_offset_reset="earliest",
    )
    source_topic = app.topic(
        source, key_serializer="raw", value_serializer="raw", partitions=PARTITIONS
    )
    seen = app.Table("seen", default=str, partitions=PARTITIONS)
    counts = app.Table("counts", default=int, partitions=PARTITIONS)

    @app.agent(source_topic)
    async def keep(stream: faust.StreamT) -> None:
        async for event in stream.events():
            async with EVENT_OR_COMMIT:
                key = event.key.decode()
                seen[event.value.decode()] = key
                counts[key] += 1
                await stream.ack(event)
                HANDLED.set()

    @app.timer(DUMP_INTERVAL_S)
    async def write_dump() -> None:
        positions = {}
        for tp in app.consumer.assignment():
            if tp.topic == source:
                positions[tp.partition] = app.consumer._committed_offset.get(tp)
        state = {
            "recovered": app.tables.recovery.completed.is_set(),
            "seen": dict(seen.items()),
            "counts": dict(counts.items()),
            "committed": positions,
        }
        with open(dump + ".tmp", "w") as out:
            json.dump(state, out)
        os.replace(dump + ".tmp", dump)

    sys.argv = [sys.argv[0], "worker", "--loglevel", "INFO", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
