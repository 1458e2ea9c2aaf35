"""One Kafka connection's authentication state and principal (:class:`Session`).

Apart from :mod:`~sparklog.broker_lite.kafka.sasl`, which runs the login, so the handlers'
typed context (:mod:`~sparklog.broker_lite.kafka.context`) can name it without importing
a handler module.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.security import scram

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Session:
    """One connection's authentication state and principal."""

    sasl: bool
    principal: str = ANONYMOUS
    #: the peer's address, for ACLs naming a host
    host: str = "*"
    authenticated: bool = False
    mechanism: str | None = None
    scram: scram.ScramServer | None = None
    #: the answer being sent ends the connection (a failed login)
    close_after: bool = False
    #: SaslHandshake v0 succeeded: the next frames are raw SASL tokens
    raw_tokens: bool = False

    @classmethod
    def for_listener(cls, protocol: str, host: str, principal: str = ANONYMOUS) -> Session:
        sasl = protocol.startswith("SASL_")
        return cls(sasl=sasl, principal=principal, host=host, authenticated=not sasl)
