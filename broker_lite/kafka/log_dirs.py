"""DescribeLogDirs: the partitions a broker leads and their stored bytes.

Kafka answers per broker, for the log directories on its disks; the admin client
asks every broker and joins the answers (Kafka UI, AKHQ, Redpanda Console,
``kafka-log-dirs.sh`` and Cruise Control show partition sizes from it).  Here a
broker's one "log directory" is the storage root, and the partitions in it are
those it leads, each with the bytes of its segments as the leader's segment
index holds them.  The offset lag is 0: a commit moves the high watermark and
the log end together.  The volume's total and usable bytes are unknown (-1): the
root is an object store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.index import load_response_schema

from sparklog.broker_lite.kafka.messages import make, nested

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import DescribeLogDirsRequest, DescribeLogDirsResponse
    from sparklog.broker_lite.kafka.context import HandlerContext


def handle_describe_log_dirs(
    ctx: HandlerContext, request: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    cls = load_response_schema(35, ctx.api_version)
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls = nested(cls, "DescribeLogDirsTopic")
    part_cls = nested(cls, "DescribeLogDirsPartition")
    asked: dict[str, set[int]] | None = None
    if request.topics is not None:
        asked = {}
        for t in request.topics:
            asked.setdefault(str(t.topic), set()).update(int(p) for p in t.partitions)
    sizes = ctx.broker.led_partition_sizes(None if asked is None else sorted(asked))
    topics = []
    for name, partitions in sorted(sizes.items()):
        chosen = [
            make(
                part_cls,
                partition_index=p,
                partition_size=size,
                offset_lag=0,
                is_future_key=False,
            )
            for p, size in sorted(partitions.items())
            if asked is None or p in asked[name]
        ]
        if chosen:
            topics.append(make(topic_cls, name=name, partitions=tuple(chosen)))
    result = make(
        result_cls,
        error_code=0,
        log_dir=str(ctx.broker.root.url),
        topics=tuple(topics),
        total_bytes=-1,
        usable_bytes=-1,
    )
    return make(cls, throttle_time=0, error_code=0, results=(result,))
