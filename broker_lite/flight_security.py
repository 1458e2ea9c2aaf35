"""TLS and users on the Flight listener (``flight_security_protocol``, by default the
Kafka listener's ``kafka_security_protocol``: one stance for every door), docs/security.md.

``SSL``/``SASL_SSL`` serve ``grpc+tls://`` with the Kafka listener's
certificate keys (``ssl_certfile``, ``ssl_keyfile``; ``ssl_client_auth`` with
``ssl_cafile`` asks clients for certificates).  ``SASL_PLAINTEXT``/``SASL_SSL``
require Flight's basic-auth header on every call (``authorization: Basic
base64(user:password)``), checked against the same SCRAM users as the Kafka
listener; a wrong or missing one is refused with UNAUTHENTICATED, a wrong one
after ``connection_failed_authentication_delay_ms`` (as the Kafka listener
delays its close), and a user who does not exist costs the same check as one
who does.  A checked
(user, password) pair is remembered by its digest while the user's credential
is unchanged, so a call costs one hash, not a PBKDF2.

Authorisation (``authorizer = "acl"``) is per call and resource, as on the
Kafka listener: :mod:`sparklog.broker_lite.flight_acls`.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from typing import Any

import pyarrow.flight as flight

from sparklog.security import scram, users

#: Flight calls a failed login's delay may hold at once (each holds a gRPC server thread)
MAX_DELAYED_FAILURES = 16


def scheme(config: Any) -> str:
    return "grpc+tls" if config.flight_protocol in ("SSL", "SASL_SSL") else "grpc"


def server_options(config: Any) -> dict[str, Any]:
    """Keyword arguments of ``FlightServerBase`` for TLS (none for plain gRPC)."""
    if scheme(config) != "grpc+tls":
        return {}
    with open(config.ssl_certfile, "rb") as f:
        cert = f.read()
    with open(config.ssl_keyfile, "rb") as f:
        key = f.read()
    options: dict[str, Any] = {"tls_certificates": [(cert, key)]}
    if config.ssl_client_auth != "none" and config.ssl_cafile:
        with open(config.ssl_cafile, "rb") as f:
            options["root_certificates"] = f.read()
        options["verify_client"] = True
    return options


class _Authenticated(flight.ServerMiddleware):
    def __init__(self, principal: str) -> None:
        super().__init__()
        self.principal = principal


class BasicAuth(flight.ServerMiddlewareFactory):
    """Checks every call's basic-auth header against the metadata log's users."""

    def __init__(self, broker: Any) -> None:
        super().__init__()
        self.broker = broker
        self.config = broker.config
        self._checked: dict[str, str] = {}
        self._lock = threading.Lock()
        self._delayed = threading.BoundedSemaphore(MAX_DELAYED_FAILURES)

    def _principal(self, header: str) -> str | None:
        kind, _, token = header.partition(" ")
        if kind.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        image = self.broker.root.metadata.image()
        credentials = {m: users.credential(image, user, m) for m in scram.MECHANISMS}
        digests = {
            m: hashlib.sha256(f"{user}\0{password}\0{c['stored_key']}".encode()).hexdigest()
            for m, c in credentials.items()
            if c is not None
        }
        with self._lock:
            if any(self._checked.get(d) == user for d in digests.values()):
                return f"User:{user}"
        # as costly for a user who does not exist as for one who does
        mechanism = scram.matching_mechanism(credentials, password)
        if mechanism is None:
            return None
        with self._lock:
            if len(self._checked) > 10_000:
                self._checked.clear()
            self._checked[digests[mechanism]] = user
        return f"User:{user}"

    def start_call(self, info: Any, headers: Any) -> flight.ServerMiddleware:
        values = headers.get("authorization") or []
        principal = self._principal(str(values[0])) if values else None
        if principal is None:
            if values:
                self._delay_failure()
            raise flight.FlightUnauthenticatedError(
                "SASL_AUTHENTICATION_FAILED: this broker's Flight listener needs a user "
                "(security_protocol SASL_PLAINTEXT or SASL_SSL, sasl_plain_username, "
                "sasl_plain_password); the one given was missing or wrong"
            )
        return _Authenticated(principal)

    def _delay_failure(self) -> None:
        """Wait ``connection_failed_authentication_delay_ms`` before a wrong login's answer,
        as the Kafka listener delays its close; at most ``MAX_DELAYED_FAILURES`` calls wait
        at once (each holds a server thread), the others are answered at once."""
        if self._delayed.acquire(blocking=False):
            try:
                time.sleep(self.config.connection_failed_authentication_delay_ms / 1000)
            finally:
                self._delayed.release()


def middleware(broker: Any) -> dict[str, flight.ServerMiddlewareFactory]:
    if broker.config.flight_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        return {"auth": BasicAuth(broker)}
    return {}
