"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677): stored credentials and the server's exchange.

A credential is what Kafka stores: the salt, the iteration count, and the
``StoredKey``/``ServerKey`` derived from the salted password; the password
itself is never stored or logged.  PLAIN logins are checked against the same
credentials (:func:`check_password`, :func:`matching_mechanism`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.errors import SaslAuthenticationFailedError, UnacceptableCredentialError

#: mechanism -> hashlib name
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's numbers for them (AlterUserScramCredentials, DescribeUserScramCredentials)
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def check_mechanism(mechanism: str) -> str:
    if mechanism not in MECHANISMS:
        raise UnacceptableCredentialError(
            f"SCRAM mechanism {mechanism!r} is not accepted; accepted: {', '.join(MECHANISMS)}"
        )
    return mechanism


def check_iterations(iterations: int) -> int:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"{iterations} SCRAM iterations are not accepted; accepted: {MIN_ITERATIONS} to "
            f"{MAX_ITERATIONS}"
        )
    return iterations


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> dict[str, Any]:
    """The stored form (the ``scram_credential`` record's value) of a salted password."""
    digest = MECHANISMS[check_mechanism(mechanism)]
    client_key = hmac.digest(salted, b"Client Key", digest)
    return {
        "salt": _b64(salt),
        "stored_key": _b64(hashlib.new(digest, client_key).digest()),
        "server_key": _b64(hmac.digest(salted, b"Server Key", digest)),
        "iterations": check_iterations(iterations),
    }


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
) -> dict[str, Any]:
    """A new credential with a random salt."""
    salt = os.urandom(SALT_BYTES)
    check_mechanism(mechanism)
    check_iterations(iterations)
    return credential_from_salted(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def check_password(mechanism: str, credential: dict[str, Any], password: str) -> bool:
    """Whether ``password`` matches ``credential`` (PLAIN against a SCRAM credential)."""
    salt = _unb64(credential["salt"])
    iterations = int(credential["iterations"])
    derived = credential_from_salted(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )
    return hmac.compare_digest(derived["stored_key"], credential["stored_key"])


_DECOYS: dict[str, dict[str, Any]] = {}


def _decoy(mechanism: str) -> dict[str, Any]:
    """A credential no password matches, made once: an unknown user's check costs as much."""
    found = _DECOYS.get(mechanism)
    if found is None:
        found = _DECOYS[mechanism] = make_credential(
            mechanism, _b64(os.urandom(32)), DEFAULT_ITERATIONS
        )
    return found


def matching_mechanism(
    credentials: Mapping[str, dict[str, Any] | None], password: str
) -> str | None:
    """The mechanism whose credential ``password`` matches, of a user's ``credentials``
    (mechanism -> credential or None), or None.

    Every mechanism the user lacks is checked against a decoy credential with the
    default iterations, so a wrong password costs the same PBKDF2s whether the user
    exists or not: login time tells no one which users exist (PLAIN, Flight's basic auth).
    """
    for mechanism in MECHANISMS:
        credential = credentials.get(mechanism)
        if credential is None:
            check_password(mechanism, _decoy(mechanism), password)
        elif check_password(mechanism, credential, password):
            return mechanism
    return None


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if eq and len(key) == 1:
            out.setdefault(key, value)
    return out


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _failed(mechanism: str) -> SaslAuthenticationFailedError:
    # Kafka's words; never the user's password or proof
    return SaslAuthenticationFailedError(
        f"Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


@dataclass
class ScramServer:
    """One server side of a SCRAM exchange: client-first, then client-final.

    ``lookup(user)`` gives the user's credential for this mechanism, or None.
    """

    mechanism: str
    lookup: Any
    user: str | None = None
    _credential: dict[str, Any] | None = None
    _auth_message: str = ""
    _nonce: str = ""
    finished: bool = False

    def first(self, message: bytes) -> bytes:
        """The server-first message for the client-first one."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise _failed(self.mechanism) from None
        gs2, _, bare = text.partition(",")
        authzid, _, bare = bare.partition(",")
        if gs2 not in ("n", "y") or not bare or (authzid and not authzid.startswith("a=")):
            raise _failed(self.mechanism)
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise _failed(self.mechanism)
        self.user = _unescape(attrs["n"])
        if authzid and _unescape(authzid[2:]) != self.user:
            # Kafka's ScramSaslServer refuses it so: no login may act as another user
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        credential = self.lookup(self.user)
        if credential is None:
            # Kafka fails at once too (no fake salt): the client learns no more than "failed"
            raise _failed(self.mechanism)
        self._credential = credential
        self._nonce = attrs["r"] + _b64(os.urandom(18))
        server_first = f"r={self._nonce},s={credential['salt']},i={int(credential['iterations'])}"
        self._auth_message = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, message: bytes) -> bytes:
        """The server-final message (``v=`` signature) if the client's proof is right."""
        if self._credential is None:
            raise _failed(self.mechanism)
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise _failed(self.mechanism) from None
        without_proof, _, proof_attr = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        # The echoed nonce must end with the server's: librdkafka 2.0 (Debian's kcat)
        # sends its own nonce before it, and Kafka through 3.9 accepts that.  The proof
        # is computed over what the client sent, so a prefix weakens nothing.
        if not proof_attr or not attrs.get("r", "").endswith(self._nonce):
            raise _failed(self.mechanism)
        digest = MECHANISMS[self.mechanism]
        auth_message = f"{self._auth_message},{without_proof}".encode()
        stored_key = _unb64(self._credential["stored_key"])
        signature = hmac.digest(stored_key, auth_message, digest)
        try:
            proof = _unb64(proof_attr)
        except ValueError:
            raise _failed(self.mechanism) from None
        if len(proof) != len(signature):
            raise _failed(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), stored_key):
            raise _failed(self.mechanism)
        server_key = _unb64(self._credential["server_key"])
        self.finished = True
        return b"v=" + _b64(hmac.digest(server_key, auth_message, digest)).encode()
