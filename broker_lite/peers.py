"""Calls to the cluster's other brokers (Kafka's inter-broker requests), on their Flight
listeners.

A transaction's coordinator hands the markers of a partition another broker leads to that
leader (Kafka's WriteTxnMarkers), which writes them through its journal; writing them into
the leader's shard log directly would revoke the shard from the leader's journal
(docs/architecture.md, "Markers to the leader").  A call goes as ``inter_broker_user``
when that is set (basic auth, as sparklog's clients log in), over TLS when this broker's
Flight listener uses TLS (the cluster's brokers share one stance), with this broker's
certificate when ``ssl_client_auth`` asks for one.  One client per broker, kept.
"""

from __future__ import annotations

import base64
import threading
import time
from typing import Any, TypeVar

import pyarrow.flight as flight

from sparklog.broker_lite import flight_security
from sparklog.broker_lite.config import BrokerConfig
from sparklog.protocol import flight as wire
from sparklog.protocol.actions import Action

R = TypeVar("R")

#: how long a peer that refused this broker's user (or its anonymity) is not called again
REFUSED_PAUSE_S = 60.0


class Peers:
    """Flight clients to the other brokers, by location (``host:port``)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._clients: dict[str, flight.FlightClient] = {}
        #: location -> monotonic time until which a peer that refused us is not called
        self._refused: dict[str, float] = {}
        self._headers: list[tuple[bytes, bytes]] = []
        if config.inter_broker_user:
            token = base64.b64encode(
                f"{config.inter_broker_user}:{config.inter_broker_password}".encode()
            )
            self._headers = [(b"authorization", b"Basic " + token)]

    @property
    def can_log_in(self) -> bool:
        """Whether calls can be made as someone: a Flight listener that asks for users
        (this broker's stance is the cluster's) is not called without inter_broker_user
        (each call would be a failed login, delayed and logged by the peer)."""
        return bool(self.config.inter_broker_user) or not self.config.flight_protocol.startswith(
            "SASL"
        )

    def call(self, location: str, action: Action[R], /, **body: Any) -> R:
        """Run ``action`` on the broker at ``location``; its decoded result.  Raises
        whatever the call raised (the caller decides what to do without the peer); a peer
        that refused this broker's user is not asked again for :data:`REFUSED_PAUSE_S`."""
        with self._lock:
            paused = self._refused.get(location, 0.0) > time.monotonic()
        if paused:
            raise flight.FlightUnauthorizedError(f"{location} refused this broker's calls")
        options = flight.FlightCallOptions(
            timeout=self.config.lease_timeout_ms / 1000, headers=self._headers
        )
        request = flight.Action(action.name, action.build(**body))
        try:
            results = list(self._client(location).do_action(request, options))
        except (flight.FlightUnauthenticatedError, flight.FlightUnauthorizedError):
            with self._lock:
                self._refused[location] = time.monotonic() + REFUSED_PAUSE_S
            raise
        return action.result(wire.decode_result(results[0].body.to_pybytes()) if results else None)

    def _client(self, location: str) -> flight.FlightClient:
        with self._lock:
            client = self._clients.get(location)
            if client is None:
                client = self._clients[location] = self._connect(location)
            return client

    def _connect(self, location: str) -> flight.FlightClient:
        scheme = flight_security.scheme(self.config)
        if scheme != "grpc+tls":
            return flight.FlightClient(f"{scheme}://{location}")
        options: dict[str, Any] = {}
        if self.config.ssl_cafile:
            options["tls_root_certs"] = _read(self.config.ssl_cafile)
        if self.config.ssl_client_auth != "none":
            options["cert_chain"] = _read(self.config.ssl_certfile)
            options["private_key"] = _read(self.config.ssl_keyfile)
        return flight.FlightClient(f"{scheme}://{location}", **options)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
