"""The SCRAM server against an RFC 5802 client written here from the RFC.

The client computes its proof over the final message it sends, as every
client does; the cases are the RFC's exchange, librdkafka 2.0's echoed nonce
(its own nonce before the server's combined one, Debian's kcat sends this),
a nonce that is not the server's, and a wrong password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from sparklog.errors import SaslAuthenticationFailedError
from sparklog.security import scram

MECHANISM = "SCRAM-SHA-256"
PASSWORD = "pencil"


def _server() -> scram.ScramServer:
    credential = scram.make_credential(MECHANISM, PASSWORD, iterations=4096)
    return scram.ScramServer(MECHANISM, lambda user: credential if user == "user" else None)


def _client_final(server_first: str, echoed_nonce: str, password: str) -> tuple[bytes, bytes]:
    """The client-final message and the server signature the client expects."""
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    without_proof = f"c=biws,r={echoed_nonce}"
    auth_message = f"n=user,r=fyko,{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth_message, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    expected = b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, "sha256"))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), expected


def _first(server: scram.ScramServer) -> tuple[str, str]:
    server_first = server.first(b"n,,n=user,r=fyko").decode()
    nonce = server_first.split(",")[0][2:]
    assert nonce.startswith("fyko") and len(nonce) > len("fyko")
    return server_first, nonce


def test_the_rfc_exchange_ends_with_the_server_signature() -> None:
    server = _server()
    server_first, nonce = _first(server)
    final, expected = _client_final(server_first, nonce, PASSWORD)
    assert server.final(final) == expected
    assert server.user == "user" and server.finished


def test_a_nonce_echoed_after_the_clients_own_is_accepted_as_kafka_does() -> None:
    server = _server()
    server_first, nonce = _first(server)
    final, expected = _client_final(server_first, "fyko" + nonce, PASSWORD)
    assert server.final(final) == expected


@pytest.mark.parametrize("case", ["other nonce", "server nonce cut", "wrong password"])
def test_a_final_message_not_bound_to_this_exchange_fails(case: str) -> None:
    server = _server()
    server_first, nonce = _first(server)
    echoed, password = {
        "other nonce": ("fyko-other", PASSWORD),
        "server nonce cut": (nonce[:-1], PASSWORD),
        "wrong password": (nonce, "wrong"),
    }[case]
    final, _ = _client_final(server_first, echoed, password)
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
        server.final(final)
    assert not server.finished
