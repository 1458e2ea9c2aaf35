"""WARNINGs at start for a security stance that works but should not last (docs/security.md).

Kafka starts with these too; an operator should still hear of them before a
client does:

* PLAIN passwords in cleartext off loopback: a Kafka listener ``SASL_PLAINTEXT``
  with PLAIN enabled, or a Flight listener ``SASL_PLAINTEXT`` (basic auth sends
  the password with every call), on an address other than loopback;
* the listeners' certificate (``ssl_certfile``) expired, or expiring within
  ``CERTIFICATE_WARNING_DAYS``: clients will refuse the handshake.
"""

from __future__ import annotations

import datetime
import logging
import re
import ssl
from typing import Any

from sparklog.broker_lite.config import loopback
from sparklog.broker_lite.kafka import x500
from sparklog.broker_lite.logs import fields
from sparklog.errors import SparklogError

log = logging.getLogger(__name__)

#: a certificate ending within this many days is warned of at every start
CERTIFICATE_WARNING_DAYS = 30
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def _loopback(address: str) -> bool:
    return loopback(address.rpartition(":")[0])


def cleartext_passwords(config: Any) -> list[str]:
    """The config keys of listeners taking passwords in cleartext off loopback."""
    found = []
    mechanisms = str(config.sasl_enabled_mechanisms).split(",")
    if (
        config.kafka_listen
        and config.kafka_security_protocol == "SASL_PLAINTEXT"
        and "PLAIN" in mechanisms
        and not _loopback(config.kafka_listen)
    ):
        found.append("kafka_listen")
    if config.flight_protocol == "SASL_PLAINTEXT" and not _loopback(config.listen):
        found.append("listen")
    return found


def certificate_days_left(path: str, now: datetime.datetime) -> float:
    """Days until the first certificate in the PEM file ``path`` expires (negative: ago)."""
    with open(path) as f:
        first = _PEM.search(f.read())
    if first is None:
        raise SparklogError(f"{path!r} holds no PEM certificate")
    ends = x500.not_after(ssl.PEM_cert_to_DER_cert(first.group(0)))
    return (ends - now).total_seconds() / 86_400


def warn_at_start(config: Any, now: datetime.datetime | None = None) -> None:
    """Log a WARNING for each risky setting of ``config`` (see the module)."""
    for key in cleartext_passwords(config):
        log.warning(
            "passwords cross the network in cleartext: this listener takes SASL PLAIN (or "
            "Flight basic auth) without TLS on an address other than loopback; use "
            "SASL_SSL (kafka_security_protocol, flight_security_protocol) or SCRAM only",
            extra=fields(key=key, address=getattr(config, key)),
        )
    uses_tls = {config.kafka_security_protocol, config.flight_protocol} & {"SSL", "SASL_SSL"}
    if not uses_tls or not config.ssl_certfile:
        return
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        days = certificate_days_left(config.ssl_certfile, now)
    except (OSError, ValueError, SparklogError) as exc:
        log.warning(
            "the listeners' certificate's expiry cannot be read",
            extra=fields(key="ssl_certfile", path=config.ssl_certfile, error=str(exc)),
        )
        return
    if days < 0:
        log.warning(
            "the listeners' certificate has expired: TLS clients will refuse the handshake",
            extra=fields(key="ssl_certfile", path=config.ssl_certfile, days_ago=round(-days, 1)),
        )
    elif days < CERTIFICATE_WARNING_DAYS:
        log.warning(
            "the listeners' certificate expires within %d days: renew it",
            CERTIFICATE_WARNING_DAYS,
            extra=fields(key="ssl_certfile", path=config.ssl_certfile, days_left=round(days, 1)),
        )
