"""TLS on the Kafka listener (``SSL``, ``SASL_SSL``), with Python's ssl module.

A connection's reader and writer are two threads, and an OpenSSL connection
must not be used by two threads at once; :class:`TLSConnection` therefore
keeps the TLS socket non-blocking and makes each read and write one short
call under a lock, waiting for the socket (``select``) outside it.  It offers
what the listener uses of a socket (``recv_into``, ``sendall``, ``shutdown``,
``close``), with the listener's idle timeout.

Principals: on ``SSL`` the client certificate's subject in RFC 2253
(``User:CN=alice,O=team-a``, as Kafka's default principal builder; see
:mod:`~sparklog.broker_lite.kafka.x500`), else
``User:ANONYMOUS``; on ``SASL_SSL`` the SASL user.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time
from typing import Any

from sparklog.broker_lite.kafka import x500
from sparklog.errors import InvalidConfigurationError

#: The TLS handshake of a new connection must finish within this.
HANDSHAKE_TIMEOUT_S = 10.0
_CHUNK_BYTES = 262_144


def server_context(config: Any) -> ssl.SSLContext | None:
    """The listener's TLS context, or None for PLAINTEXT/SASL_PLAINTEXT."""
    if config.kafka_security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
        if config.ssl_cafile:
            context.load_verify_locations(config.ssl_cafile)
    except (OSError, ssl.SSLError) as exc:
        # names the files, never their content (a key must not reach a log)
        raise InvalidConfigurationError(
            f"config keys ssl_certfile={config.ssl_certfile!r}, ssl_keyfile="
            f"{config.ssl_keyfile!r}, ssl_cafile={config.ssl_cafile!r}: cannot be loaded "
            f"({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc.args[0]}); accepted: "
            "PEM files readable by the broker"
        ) from None
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[config.ssl_client_auth]
    return context


def subject_principal(der: bytes | None) -> str | None:
    """``User:<subject>`` of a verified peer certificate (DER), RFC 2253 as Kafka; or None.

    Raises SslAuthenticationFailedError if the certificate cannot be read.
    """
    if not der:
        return None
    return "User:" + x500.subject_rfc2253(der)


class TLSConnection:
    """A server-side TLS socket two threads may read and write at once (see the module)."""

    def __init__(self, sock: ssl.SSLSocket, timeout_s: float) -> None:
        self.sock = sock
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        sock.setblocking(False)

    def _wait(self, want_write: bool, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("TLS connection idle")
        if want_write:
            select.select([], [self.sock], [], remaining)
        else:
            select.select([self.sock], [], [], remaining)

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        deadline = time.monotonic() + self.timeout_s
        while True:
            with self._lock:
                try:
                    return self.sock.recv_into(buffer, nbytes)
                except ssl.SSLWantReadError:
                    want_write = False
                except ssl.SSLWantWriteError:
                    want_write = True
                except ssl.SSLZeroReturnError:
                    return 0
                except ssl.SSLError as exc:
                    raise ConnectionResetError(f"TLS error: {exc}") from None
            self._wait(want_write, deadline)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        pos = 0
        deadline = time.monotonic() + self.timeout_s
        while pos < len(view):
            with self._lock:
                try:
                    pos += self.sock.send(view[pos : pos + _CHUNK_BYTES])
                    continue
                except ssl.SSLWantWriteError:
                    want_write = True
                except ssl.SSLWantReadError:
                    want_write = False
                except ssl.SSLError as exc:
                    raise ConnectionResetError(f"TLS error: {exc}") from None
            self._wait(want_write, deadline)

    def shutdown(self, how: int) -> None:
        # the TCP shutdown only (never the TLS alert, which would need the lock)
        socket.socket.shutdown(self.sock, how)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def settimeout(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s


def accept(
    context: ssl.SSLContext, conn: socket.socket, idle_s: float
) -> tuple[TLSConnection, str | None]:
    """The TLS connection over ``conn`` after its handshake, and its certificate principal.

    Raises OSError (ssl.SSLError among them) if the handshake fails or stalls,
    SslAuthenticationFailedError if the verified certificate cannot be read.
    """
    conn.settimeout(min(idle_s, HANDSHAKE_TIMEOUT_S))
    sock = context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
    try:
        sock.do_handshake()
    except BaseException:
        sock.close()
        raise
    try:
        # getpeercert() is empty unless the certificate was verified
        principal = (
            subject_principal(sock.getpeercert(binary_form=True)) if sock.getpeercert() else None
        )
    except BaseException:
        sock.close()
        raise
    return TLSConnection(sock, idle_s), principal
