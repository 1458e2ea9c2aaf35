"""Does an address a plain-gRPC client cannot reach serve TLS?

A broker whose Flight listener is ``SSL``/``SASL_SSL`` closes a plaintext gRPC
connection at once, and gRPC reports only "unreachable ... Socket closed".  A
client that did not ask for TLS probes the address once with a TLS handshake
(no certificate checked: it only asks whether TLS is spoken there) so that its
error can name TLS and the settings that turn it on.
"""

from __future__ import annotations

import socket
import ssl

from sparklog.errors import InvalidConfigurationError


def serves_tls(location: str, timeout_s: float = 2.0) -> bool:
    """Whether ``location`` (``host:port``) completes a TLS handshake (or answers with a
    TLS alert, as a server that wants a client certificate may)."""
    host, _, port = location.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock,
            context.wrap_socket(sock),
        ):
            return True
    except ssl.SSLError as exc:
        return "ALERT" in str(exc.reason or "")
    except (OSError, ValueError):
        return False


def tls_listener_error(location: str) -> InvalidConfigurationError | None:
    """The error for a plaintext client given ``location`` if it serves TLS, else None."""
    if not serves_tls(location):
        return None
    return InvalidConfigurationError(
        f"broker {location} serves TLS (its flight_security_protocol is SSL or SASL_SSL) and "
        "this client connected without it; set security_protocol to SSL or SASL_SSL "
        "(SPARKLOG_SECURITY_PROTOCOL for the CLI) and ssl_cafile to the CA that signed the "
        "broker's certificate (SPARKLOG_SSL_CAFILE)"
    )
