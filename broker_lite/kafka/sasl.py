"""SASL on the Kafka listener: SaslHandshake, SaslAuthenticate, and SCRAM user admin.

A ``SASL_PLAINTEXT``/``SASL_SSL`` connection starts unauthenticated: it may
send ApiVersions, SaslHandshake and SaslAuthenticate only (anything else
closes it at once, as Kafka does), and these are handled one at a time by the
connection's reader.  PLAIN checks the password against the user's SCRAM
credential (either mechanism); SCRAM-SHA-256/512 run RFC 5802's exchange
(:class:`~sparklog.security.scram.ScramServer`).  A failure answers
SASL_AUTHENTICATION_FAILED with Kafka's message (never the password) and
closes the connection.  SaslHandshake v0 (librdkafka before 2.x checks for
it, and clients without SaslAuthenticate use it) is followed by raw SASL
tokens in size-prefixed frames rather than SaslAuthenticate requests, as in
Kafka: :func:`raw_token_reply` answers those.  The principal is ``User:<name>``; on PLAINTEXT and
SSL listeners it is ``User:ANONYMOUS`` (SSL with a client certificate: the
certificate's subject).

Credentials come from the metadata image; a user the image lacks is looked
up once more in the log (``refresh_on_miss``), so a user created a moment
ago through another broker or the CLI can log in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema

from sparklog.broker_lite.kafka import acl
from sparklog.broker_lite.kafka.messages import errno_of, make, nested

# ANONYMOUS and Session are named through this module by the listener (sasl.Session)
from sparklog.broker_lite.kafka.session import ANONYMOUS as ANONYMOUS
from sparklog.broker_lite.kafka.session import Session as Session
from sparklog.errors import (
    IllegalSaslStateError,
    ResourceNotFoundError,
    SaslAuthenticationFailedError,
    SparklogError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from sparklog.security import scram, users

if TYPE_CHECKING:
    from sparklog.broker_lite.kafka.api_types import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )
    from sparklog.broker_lite.kafka.context import BrokerView, HandlerContext


#: APIs an unauthenticated SASL connection may send
PRE_AUTH_APIS = frozenset({17, 18, 36})


def enabled_mechanisms(config: Any) -> list[str]:
    return [m for m in str(config.sasl_enabled_mechanisms).split(",") if m]


def _lookup(broker: BrokerView, mechanism: str) -> Any:
    def lookup(user: str) -> dict[str, Any] | None:
        metadata = broker.root.metadata
        found = users.credential(metadata.image(), user, mechanism)
        if found is None:
            found = users.credential(metadata.refresh_on_miss(), user, mechanism)
        return found

    return lookup


def _credentials(broker: BrokerView, user: str) -> dict[str, dict[str, Any] | None]:
    """The user's credential per mechanism (the log probed once if the image has none)."""
    metadata = broker.root.metadata
    image = metadata.image()
    found = {m: users.credential(image, user, m) for m in scram.MECHANISMS}
    if not any(found.values()):
        image = metadata.refresh_on_miss()
        found = {m: users.credential(image, user, m) for m in scram.MECHANISMS}
    return found


def _check_plain(broker: BrokerView, token: bytes) -> str:
    """The user of a PLAIN token (``authzid NUL user NUL password``) if the password is right.

    A wrong password costs as much for an unknown user as for a known one
    (:func:`~sparklog.security.scram.matching_mechanism`).
    """
    failed = SaslAuthenticationFailedError(
        "Authentication failed: Invalid username or password (SASL mechanism PLAIN)"
    )
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise failed
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise failed from None
    if authzid and authzid != user:
        raise failed
    if scram.matching_mechanism(_credentials(broker, user), password) is None:
        raise failed
    return user


def handle_sasl_handshake(
    ctx: HandlerContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    cls = load_response_schema(17, ctx.api_version)
    session: Session | None = ctx.session
    mechanisms = tuple(enabled_mechanisms(ctx.broker.config))
    if session is None or not session.sasl or session.authenticated:
        if session is not None:
            session.close_after = True
        return make(cls, error_code=IllegalSaslStateError.errno, mechanisms=mechanisms)
    if request.mechanism not in mechanisms:
        session.close_after = True
        return make(cls, error_code=UnsupportedSaslMechanismError.errno, mechanisms=mechanisms)
    session.mechanism = request.mechanism
    session.raw_tokens = ctx.api_version == 0
    if request.mechanism in scram.MECHANISMS:
        session.scram = scram.ScramServer(request.mechanism, _lookup(ctx.broker, request.mechanism))
    return make(cls, error_code=0, mechanisms=mechanisms)


def _exchange(broker: BrokerView, session: Session, token: bytes) -> bytes:
    """One step of the mechanism's exchange: the server's token in reply to ``token``.

    Marks ``session`` authenticated when the exchange ends; raises a
    :class:`SparklogError` (SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE) on failure.
    """
    if not session.sasl or session.authenticated:
        raise IllegalSaslStateError("SaslAuthenticate on a connection not authenticating")
    if session.mechanism is None:
        raise IllegalSaslStateError("SaslAuthenticate before SaslHandshake")
    if session.mechanism == "PLAIN":
        user = _check_plain(broker, token)
        reply = b""
    else:
        exchange = session.scram
        assert exchange is not None
        if exchange.user is None:
            return exchange.first(token)
        reply = exchange.final(token)
        user = exchange.user
    session.principal = f"User:{user}"
    session.authenticated = True
    session.scram = None
    return reply


def raw_token_reply(broker: BrokerView, session: Session, token: bytes) -> bytes | None:
    """The server's raw token after SaslHandshake v0; None: the login failed (close, as Kafka)."""
    try:
        return _exchange(broker, session, token)
    except SparklogError:
        session.close_after = True
        return None


def handle_sasl_authenticate(
    ctx: HandlerContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    cls = load_response_schema(36, ctx.api_version)
    session: Session | None = ctx.session
    try:
        if session is None:
            raise IllegalSaslStateError("SaslAuthenticate on a connection not authenticating")
        reply = _exchange(ctx.broker, session, bytes(request.auth_bytes))
        return make(cls, error_code=0, error_message=None, auth_bytes=reply, session_lifetime=0)
    except SparklogError as exc:
        if session is not None:
            session.close_after = True
        return make(
            cls,
            error_code=errno_of(exc),
            error_message=str(exc),
            auth_bytes=b"",
            session_lifetime=0,
        )


# -- AlterUserScramCredentials / DescribeUserScramCredentials ---------------------------
_MECHANISM_BY_CODE = {code: name for name, code in scram.MECHANISM_CODES.items()}


def handle_describe_user_scram_credentials(
    ctx: HandlerContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    cls = load_response_schema(50, ctx.api_version)
    result_cls = nested(cls, "DescribeUserScramCredentialsResult")
    info_cls = nested(cls, "CredentialInfo")
    if not acl.allowed(ctx, "DESCRIBE", "CLUSTER", "kafka-cluster"):
        return make(
            cls,
            throttle_time=0,
            error_code=acl.CLUSTER_DENIED.errno,
            error_message="not authorized to describe the cluster's users",
            results=(),
        )
    image = ctx.broker.root.metadata.image()
    known = users.users(image)
    names = sorted(known) if request.users is None else [u.name for u in request.users]
    results = []
    for name in names:
        creds = known.get(name)
        if creds is None:
            results.append(
                make(
                    result_cls,
                    user=name,
                    error_code=ResourceNotFoundError.errno,
                    error_message=f"Attempt to describe a user credential that does not exist: "
                    f"{name}",
                    credential_infos=(),
                )
            )
            continue
        results.append(
            make(
                result_cls,
                user=name,
                error_code=0,
                error_message=None,
                credential_infos=tuple(
                    make(info_cls, mechanism=scram.MECHANISM_CODES[m], iterations=i)
                    for m, i in creds
                    if m in scram.MECHANISM_CODES
                ),
            )
        )
    return make(cls, throttle_time=0, error_code=0, error_message=None, results=tuple(results))


def handle_alter_user_scram_credentials(
    ctx: HandlerContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    cls = load_response_schema(51, ctx.api_version)
    result_cls = nested(cls, "AlterUserScramCredentialsResult")
    metadata = ctx.broker.root.metadata
    results = []
    may = acl.allowed(ctx, "ALTER", "CLUSTER", "kafka-cluster")

    def one(name: str, call: Any) -> None:
        error, message = 0, None
        try:
            if not may:
                raise acl.CLUSTER_DENIED("not authorized to alter the cluster's users")
            call()
        except SparklogError as exc:
            error, message = errno_of(exc), str(exc)
        results.append(make(result_cls, user=name, error_code=error, error_message=message))

    for deletion in request.deletions:

        def delete(d: Any = deletion) -> None:
            mechanism = _MECHANISM_BY_CODE.get(int(d.mechanism))
            if mechanism is None:
                raise UnacceptableCredentialError(f"unknown SCRAM mechanism {int(d.mechanism)}")
            users.delete(metadata, d.name, mechanism)

        one(deletion.name, delete)
    for upsertion in request.upsertions:

        def upsert(u: Any = upsertion) -> None:
            mechanism = _MECHANISM_BY_CODE.get(int(u.mechanism))
            if mechanism is None:
                raise UnacceptableCredentialError(f"unknown SCRAM mechanism {int(u.mechanism)}")
            value = scram.credential_from_salted(
                mechanism, bytes(u.salted_password), bytes(u.salt), int(u.iterations)
            )
            users.set_credential(metadata, u.name, mechanism, value)

        one(upsertion.name, upsert)
    return make(cls, throttle_time=0, results=tuple(results))
