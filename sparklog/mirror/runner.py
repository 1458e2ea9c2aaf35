"""Running a mirror link: step after step until stopped, choosing the copier by the link's
source (a root: :class:`sparklog.mirror.copier.Mirror`; ``kafka://``:
:class:`sparklog.mirror.kafka_source.KafkaMirror`, which builds on the copier's pieces).

Here, above both copiers, so neither imports the other's module back: ``sparklog mirror
run`` and a broker's ``mirror_links`` (through :class:`sparklog.mirror.admin.RootLinks`)
run links with :func:`run`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sparklog.errors import SparklogError
from sparklog.mirror.copier import GROUP_SYNC_INTERVAL_MS, Mirror
from sparklog.mirror.links import MirrorLink, UnknownMirrorLinkError, get_link

if TYPE_CHECKING:
    from sparklog.mirror.metrics import MirrorMetrics
    from sparklog.storage import LogRoot

log = logging.getLogger("sparklog.mirror")


def run(
    dest: LogRoot,
    link_name: str,
    *,
    interval_ms: int = 200,
    group_sync_interval_ms: int = GROUP_SYNC_INTERVAL_MS,
    stop: Any = None,
    on_step: Any = None,
    metrics: MirrorMetrics | None = None,
) -> None:
    """Mirror until ``stop`` (a threading.Event) is set or the link is deleted.

    The link is re-read every step: paused, it copies nothing; its source
    unreachable, it keeps its position (which lives in the destination's shard
    logs) and logs why, trying again next step.  Groups are synced at most every
    ``group_sync_interval_ms`` (listing a root's groups is a LIST request).
    """
    mirror: Any = None
    said: set[str] = set()
    groups_synced_at = -float("inf")
    while stop is None or not stop.is_set():
        started = time.monotonic()
        try:
            link = get_link(dest, link_name)
        except UnknownMirrorLinkError:
            log.info("mirror link %s deleted: stopping", link_name)
            _close(mirror)
            return
        except SparklogError as exc:
            log.warning("mirror link %s: cannot read the link: %s", link_name, exc)
            link = None
        if link is not None and not link.paused:
            try:
                if mirror is None or mirror.link != link:
                    _close(mirror)
                    mirror = mirror_for(dest, link)
                due = (time.monotonic() - groups_synced_at) * 1000 >= group_sync_interval_ms
                report = mirror.step(groups=due)
                if due:
                    groups_synced_at = time.monotonic()
                if metrics is not None:
                    metrics.observe(link_name, report)
                if on_step is not None:
                    on_step(report)
                for reason in report.skipped.values():
                    if reason not in said:  # once per process, not once per step
                        said.add(reason)
                        log.warning("mirror link %s: %s", link_name, reason)
                if report.records:
                    log.info(
                        "mirror link %s: copied %d records in %d segments",
                        link_name,
                        report.records,
                        report.segments,
                    )
                if report.records or report.groups_synced:
                    continue  # more may be waiting: no pause
            except Exception as exc:  # the source or the store failed: position kept
                if isinstance(exc, SparklogError | OSError):
                    log.warning(
                        "mirror link %s: step failed, position kept (%s: %s)",
                        link_name,
                        type(exc).__name__,
                        exc,
                    )
                else:
                    log.exception("mirror link %s: step failed, position kept", link_name)
                if metrics is not None:
                    metrics.failed(link_name)
                _close(mirror)
                mirror = None
        remaining = interval_ms / 1000 - (time.monotonic() - started)
        if remaining > 0:
            if stop is not None:
                stop.wait(remaining)
            else:
                time.sleep(remaining)


def _close(mirror: Any) -> None:
    """Release a copier's connections (a Kafka-protocol source's consumer)."""
    close = getattr(mirror, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # closing a broken consumer: nothing more to release
            log.debug("closing the mirror failed", exc_info=True)


def mirror_for(dest: LogRoot, link: MirrorLink) -> Any:
    if link.kafka_source:
        from sparklog.mirror.kafka_source import KafkaMirror

        return KafkaMirror(dest, link)
    return Mirror(dest, link)
