"""How a client reaches secured brokers: kafka-python's setting names, for the Flight listener.

``security_protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl_mechanism``,
``sasl_plain_username``, ``sasl_plain_password``, ``ssl_cafile``, ``ssl_certfile``,
``ssl_keyfile``: the same names as kafka-python's, also in Kafka's dotted style.
TLS makes the client connect with ``grpc+tls://``; SASL sends the user and
password in Flight's basic-auth header (``authorization: Basic ...``) over the
connection, which the broker checks against the users of the metadata log.
Unset, each is read from ``SPARKLOG_<NAME>`` (``SPARKLOG_SASL_PLAIN_PASSWORD``),
which is how the CLI takes them.  The password never appears in a repr.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.errors import InvalidConfigurationError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KEYS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)


@dataclass(frozen=True)
class ClientSecurity:
    """A client's TLS and SASL settings (PLAINTEXT when nothing is set)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def scheme(self) -> str:
        return "grpc+tls" if self.tls else "grpc"

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments of ``pyarrow.flight.connect`` for this client."""
        if not self.tls:
            return {}
        options: dict[str, Any] = {}
        if self.cafile:
            options["tls_root_certs"] = _read(self.cafile, "ssl_cafile")
        if self.certfile:
            options["cert_chain"] = _read(self.certfile, "ssl_certfile")
            options["private_key"] = _read(self.keyfile or self.certfile, "ssl_keyfile")
        return options

    def headers(self) -> list[tuple[bytes, bytes]]:
        if not self.sasl:
            return []
        token = base64.b64encode(f"{self.username}:{self.password}".encode())
        return [(b"authorization", b"Basic " + token)]


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidConfigurationError(f"{key} {path!r} cannot be read ({exc.strerror})") from None


def security_of(
    settings: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> ClientSecurity:
    """Settings (kafka-python's names; dotted names too) over ``SPARKLOG_<NAME>`` variables."""
    env = os.environ if environ is None else environ
    given = {str(k).replace(".", "_"): v for k, v in (settings or {}).items() if v is not None}
    values: dict[str, Any] = {}
    for key in KEYS:
        if key in given:
            values[key] = str(given[key])
        elif f"SPARKLOG_{key.upper()}" in env:
            values[key] = env[f"SPARKLOG_{key.upper()}"]
    protocol = values.get("security_protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise InvalidConfigurationError(
            f"security_protocol {protocol!r} is not accepted; accepted: {', '.join(PROTOCOLS)}"
        )
    mechanism = values.get("sasl_mechanism", "PLAIN").upper()
    if mechanism not in MECHANISMS:
        raise InvalidConfigurationError(
            f"sasl_mechanism {mechanism!r} is not accepted; accepted: {', '.join(MECHANISMS)}"
        )
    security = ClientSecurity(
        protocol,
        mechanism,
        values.get("sasl_plain_username"),
        values.get("sasl_plain_password"),
        values.get("ssl_cafile"),
        values.get("ssl_certfile"),
        values.get("ssl_keyfile"),
    )
    if security.sasl and (not security.username or security.password is None):
        raise InvalidConfigurationError(
            f"security_protocol {protocol} needs sasl_plain_username and sasl_plain_password "
            "(or SPARKLOG_SASL_PLAIN_USERNAME / SPARKLOG_SASL_PLAIN_PASSWORD)"
        )
    return security
