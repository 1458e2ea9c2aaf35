"""One address, two modes: a storage root URL (embedded) or ``sparklog://host:port,...`` (brokers).

The default address comes from ``SPARKLOG_ADDRESS``; storage options follow
the one spelling of :mod:`sparklog.storage_options`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.errors import InvalidConfigurationError

BROKER_SCHEME = "sparklog://"
ROOT_SCHEMES = ("file", "memory", "s3", "s3a", "gs", "gcs", "abfs", "az")
ENV_ADDRESS = "SPARKLOG_ADDRESS"
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
#: a host with no port (an IPv4 address, localhost, a bracketed IPv6 address), or with an
#: empty one: never a folder name anyone means, so refused rather than read as a root
_BARE_HOST = re.compile(
    r"^(?:\d{1,3}(?:\.\d{1,3}){3}|localhost|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]{2,}:)$",
    re.IGNORECASE,
)
#: the broker's default Flight port (conf/broker.toml ``listen``), named in the hint
DEFAULT_BROKER_PORT = 8815
ACCEPTED = (
    "a storage root (a local path, file://, memory:// or s3://bucket/prefix URL) or "
    "brokers as sparklog://host:port[,host:port] (or plain host:port[,host:port], as "
    "kafka-python's bootstrap_servers)"
)


@dataclass(frozen=True)
class Address:
    """A parsed address: ``root`` URL for embedded mode, or ``bootstrap`` for broker mode."""

    text: str
    root: str | None = None
    bootstrap: str | None = None

    @property
    def is_broker(self) -> bool:
        return self.bootstrap is not None


def parse_address(address: str | None = None, environ: Mapping[str, str] | None = None) -> Address:
    """Parse ``address`` (or ``$SPARKLOG_ADDRESS``); InvalidConfigurationError naming what is
    accepted."""
    env = os.environ if environ is None else environ
    text = (address if address is not None else env.get(ENV_ADDRESS, "")).strip()
    if not text:
        raise InvalidConfigurationError(
            f"no address given (--address or ${ENV_ADDRESS}); accepted: {ACCEPTED}"
        )
    bare = [h.strip() for h in text.split(",") if _BARE_HOST.match(h.strip())]
    if "://" not in text and bare:
        host = bare[0].rstrip(":")
        raise InvalidConfigurationError(
            f"address {text!r}: {bare[0]!r} is a host without a port; accepted: "
            f"{host}:PORT (a broker listens on {DEFAULT_BROKER_PORT} by default: "
            f"{host}:{DEFAULT_BROKER_PORT}), or a storage root path such as ./{host}"
        )
    if "://" not in text and all(_HOST_PORT.match(h.strip()) for h in text.split(",")):
        text = BROKER_SCHEME + text  # a bootstrap list, as Kafka's clients write it
    if text.startswith(BROKER_SCHEME):
        hosts = [h.strip() for h in text[len(BROKER_SCHEME) :].rstrip("/").split(",")]
        bad = [h for h in hosts if not _HOST_PORT.match(h) or int(h.rsplit(":", 1)[1]) > 65535]
        if not hosts or bad:
            raise InvalidConfigurationError(
                f"bad broker address {text!r} (at {bad[0] if bad else ''!r}); "
                "accepted: sparklog://host:port[,host:port]"
            )
        return Address(text, bootstrap=",".join(hosts))
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in ROOT_SCHEMES:
            raise InvalidConfigurationError(
                f"unsupported address scheme {scheme!r} in {text!r}; accepted: {ACCEPTED}"
            )
        if scheme in ("s3", "s3a", "gs", "gcs") and not text.split("://", 1)[1].strip("/"):
            raise InvalidConfigurationError(
                f"address {text!r} names no bucket; accepted: {ACCEPTED}"
            )
    return Address(text, root=text)


def parse_bootstrap(bootstrap: str) -> list[str]:
    """``host:port[,host:port]`` as a list; InvalidConfigurationError naming the bad entry."""
    out = []
    for entry in str(bootstrap).split(","):
        entry = entry.strip()
        if entry.startswith("grpc://"):
            entry = entry[len("grpc://") :]
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigurationError(
                f"bootstrap entry {entry!r} is not accepted; accepted: host:port[,host:port]"
            )
        out.append(entry)
    return out
