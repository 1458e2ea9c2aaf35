"""Broker configuration: ``conf/broker.toml`` keys, defaults, validation, env overrides.

Precedence, lowest first: the defaults below, the TOML file, ``SPARKLOG_<KEY>``
environment variables (``SPARKLOG_LINGER_MS=2``), then explicit overrides
(the CLI's ``--root``, ``--listen``, ``--id``).  A bad value raises
:class:`~broker_lite.errors.InvalidConfigurationError` naming the key and what it accepts.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.errors import InvalidConfigurationError
from sparklog.settings import (
    BOOLEAN,
    TEXT,
    Setting,
    about,
    address,
    choice,
    choice_set,
    integer,
    json_object,
    settings_of,
    unknown_key,
)
from sparklog.storage.log import STAGED_OBJECT_MAX_AGE_MS
from sparklog.storage_options import merge_options, storage_options_from_env

ENV_PREFIX = "SPARKLOG_"


@dataclass(frozen=True)
class BrokerConfig:
    """Every broker setting, typed, with its default, meaning and accepted values.

    conf/broker.toml documents the same keys (a test compares them).
    """

    root: str = field(
        default="./sparklog-data",
        metadata=about("Storage root URL: a path, file://, memory:// or s3://", TEXT),
    )
    storage_options: dict[str, Any] = field(
        default_factory=dict,
        metadata=about(
            "fsspec storage options for the root (s3 endpoint, keys); environment: "
            "SPARKLOG_STORAGE_<KEY> per option, as every sparklog command reads them",
            json_object("a table (TOML)"),
        ),
    )
    fsync: bool = field(
        default=False, metadata=about("fsync objects and commits on a local root", BOOLEAN)
    )
    snapshot_interval: int = field(
        default=32, metadata=about("Partition log snapshot every N commits", integer(1))
    )
    listen: str = field(
        default="127.0.0.1:8815",
        metadata=about("Arrow Flight address; port 0 picks a free one", address()),
    )
    advertised_host: str = field(
        default="",
        metadata=about("Host name other brokers and clients use; empty = listen host", TEXT),
    )
    kafka_listen: str = field(
        default="127.0.0.1:9092",
        metadata=about(
            "Kafka protocol address; port 0 picks a free one; empty disables",
            address(disableable=True),
        ),
    )
    kafka_advertised: str = field(
        default="",
        metadata=about(
            "HOST:PORT Kafka clients are told (Metadata); empty = the listen address",
            address(disableable=True),
        ),
    )
    kafka_max_request_bytes: int = field(
        default=104_857_600,
        metadata=about(
            "Largest Kafka request frame; a bigger one closes that connection", integer(1024)
        ),
    )
    kafka_security_protocol: str = field(
        default="PLAINTEXT",
        metadata=about(
            "Kafka listener's security protocol (docs/security.md)",
            choice("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"),
        ),
    )
    sasl_enabled_mechanisms: str = field(
        default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        metadata=about(
            "SASL mechanisms a SASL_* Kafka listener accepts (comma-separated)",
            choice_set("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        ),
    )
    ssl_certfile: str = field(
        default="", metadata=about("PEM certificate (chain) of an SSL/SASL_SSL listener", TEXT)
    )
    ssl_keyfile: str = field(default="", metadata=about("PEM private key of ssl_certfile", TEXT))
    ssl_cafile: str = field(
        default="", metadata=about("PEM CA certificates that sign client certificates", TEXT)
    )
    ssl_client_auth: str = field(
        default="none",
        metadata=about(
            "Kafka's ssl.client.auth: client certificates not asked for, requested or required",
            choice("none", "requested", "required"),
        ),
    )
    flight_security_protocol: str = field(
        default="",
        metadata=about(
            "Flight listener's security: TLS (SSL) and/or users by basic auth (SASL_*), with "
            "the ssl_* keys and the same users as Kafka; empty = kafka_security_protocol's",
            choice("", "PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"),
        ),
    )
    authorizer: str = field(
        default="",
        metadata=about(
            "Empty (every principal may do everything) or acl (Kafka's ACLs from the metadata log)",
            choice("", "acl"),
        ),
    )
    super_users: str = field(
        default="",
        metadata=about("Principals every ACL check allows, as Kafka: User:a;User:b", TEXT),
    )
    inter_broker_user: str = field(
        default="",
        metadata=about(
            "The user this broker calls other brokers' Flight listeners as (transaction "
            "markers to a partition's leader), when they ask for users; needs CLUSTER_ACTION "
            "on the cluster (or super_users)",
            TEXT,
        ),
    )
    inter_broker_password: str = field(
        default="",
        metadata=about("inter_broker_user's password (keep the file private)", TEXT),
    )
    allow_everyone_if_no_acl_found: bool = field(
        default=False,
        metadata=about(
            "Kafka's allow.everyone.if.no.acl.found: a resource no ACL names is open to all",
            BOOLEAN,
        ),
    )
    allow_insecure_listener: bool = field(
        default=False,
        metadata=about(
            "Allow a listener without authentication (Kafka or Flight without an authorizer, "
            "the metrics endpoint) on a non-loopback address",
            BOOLEAN,
        ),
    )
    sasl_server_max_receive_size: int = field(
        default=524_288,
        metadata=about(
            "Kafka's sasl.server.max.receive.size: largest Kafka request frame of a connection "
            "that has not finished SASL authentication; a bigger size prefix closes it",
            integer(1024),
        ),
    )
    max_topics_per_principal: int = field(
        default=0,
        metadata=about(
            "Topics one principal may have created (and not deleted); one more is refused "
            "with POLICY_VIOLATION; super users are not capped; 0: no cap (as Kafka)",
            integer(0),
        ),
    )
    max_partitions_per_principal: int = field(
        default=0,
        metadata=about(
            "Partitions of the topics one principal created (CreateTopics and "
            "CreatePartitions count); more are refused with POLICY_VIOLATION; super users "
            "are not capped; 0: no cap (as Kafka)",
            integer(0),
        ),
    )
    connection_failed_authentication_delay_ms: int = field(
        default=100,
        metadata=about(
            "Kafka's connection.failed.authentication.delay.ms: a connection whose SASL login "
            "failed gets its failure answer, then is closed this much later (no request read "
            "meanwhile); Flight's UNAUTHENTICATED answer waits as long; 0: at once",
            integer(0),
        ),
    )
    connections_max_idle_ms: int = field(
        default=600_000,
        metadata=about(
            "Kafka's connections.max.idle.ms: a Kafka connection with no request for this "
            "long (and none being answered) is closed",
            integer(1),
        ),
    )
    num_io_threads: int = field(
        default=512,
        metadata=about(
            "Kafka's num.io.threads: threads handling Kafka requests (a Produce waits for its "
            "commit on one); a throttled answer, a parked JoinGroup or long-poll Fetch holds "
            "none while it waits",
            integer(1),
        ),
    )
    max_connections: int = field(
        default=1024,
        metadata=about(
            "Kafka connections served at once (each holds a thread); when full, a new one "
            "replaces the oldest that has not authenticated, else it is refused",
            integer(1),
        ),
    )
    max_connections_per_ip: int = field(
        default=256,
        metadata=about(
            "Kafka's max.connections.per.ip: connections from one address (a quarter of "
            "max_connections by default, so one host cannot hold them all)",
            integer(1),
        ),
    )
    max_connections_per_principal: int = field(
        default=512,
        metadata=about(
            "Kafka connections authenticated as one principal; a login past it is closed "
            "(super users and User:ANONYMOUS are not counted), so one tenant cannot hold "
            "every connection",
            integer(1),
        ),
    )
    queued_max_requests_per_principal: int = field(
        default=0,
        metadata=about(
            "Kafka requests of one principal handled at once (queued for or on a request "
            "thread); more wait unread in that principal's own connections, so one tenant "
            "cannot fill the request pool ahead of the others (super users and "
            "User:ANONYMOUS are not counted); 0: a quarter of num_io_threads",
            integer(0),
        ),
    )
    max_connection_creation_rate: int = field(
        default=0,
        metadata=about(
            "Kafka's max.connection.creation.rate: new Kafka connections a second (a burst "
            "of one second's worth); past it the listener waits before accepting; 0: no bound",
            integer(0),
        ),
    )
    max_unauthenticated_connections: int = field(
        default=256,
        metadata=about(
            "Kafka connections that have not finished authentication (PLAINTEXT: not sent a "
            "whole request); one more closes the oldest of them",
            integer(1),
        ),
    )
    queued_max_request_bytes: int = field(
        default=268_435_456,
        metadata=about(
            "Kafka's queued.max.request.bytes: memory all Kafka requests being read or "
            "handled may hold; a frame's buffer grows as its bytes arrive",
            integer(1),
        ),
    )
    auto_create_topics_enable: bool = field(
        default=True,
        metadata=about(
            "Kafka's auto.create.topics.enable: create a missing topic a Kafka Produce or "
            "Metadata request names",
            BOOLEAN,
        ),
    )
    num_partitions: int = field(
        default=1,
        metadata=about(
            "Kafka's num.partitions: partitions of an auto-created topic (and CreateTopics "
            "with -1)",
            integer(1),
        ),
    )
    consumer_offsets_settle_ms: int = field(
        default=5_000,
        metadata=about(
            "How old an offset commit must be before the derived __consumer_offsets topic "
            "serves it (larger than a commit's write time plus the brokers' clock skew)",
            integer(1),
        ),
    )
    broker_id: int = field(
        default=0, metadata=about("This broker's id, unique in the cluster", integer(0))
    )
    linger_ms: int = field(
        default=5,
        metadata=about(
            "How long a broker gathers produce requests (of all topics) into one flush", integer(0)
        ),
    )
    journal_offset_commits: bool = field(
        default=True,
        metadata=about(
            "Journal the offset commits of the groups this broker coordinates (format 3: one "
            "journal commit per flush for all groups, folded into each group's log every "
            "fold_interval_ms) instead of one group-log commit each",
            BOOLEAN,
        ),
    )
    journal_records: bool = field(
        default=True,
        metadata=about(
            "Journal the records this broker's produce path commits (format 3: one journal "
            "commit per flush for every shard it touched, folded into each shard's log every "
            "fold_interval_ms; readers read the log and the journal's tail) instead of one "
            "shard-log commit per shard and flush",
            BOOLEAN,
        ),
    )
    offsets_flush_interval_ms: int = field(
        default=50,
        metadata=about(
            "Least time between two journal commits of offset commits (an idle broker's "
            "commit is written at once): the bound on an offset commit's wait",
            integer(0),
        ),
    )
    fold_interval_ms: int = field(
        default=60_000,
        metadata=about(
            "How long a group's journalled offset commits wait before they are folded into "
            "its log (one commit per group with changes); the journal is replaced and "
            "deleted every ten of these, at least a minute apart",
            integer(0),
        ),
    )
    batch_bytes: int = field(
        default=4_194_304,
        metadata=about("Flush the broker's pending records (all topics) at this size", integer(1)),
    )
    max_request_bytes: int = field(
        default=67_108_864, metadata=about("Largest produce request accepted", integer(1))
    )
    max_request_batches: int = field(
        default=10_000,
        metadata=about("Most record batches one produce request (DoPut) may carry", integer(1)),
    )
    max_inflight_request_bytes: int = field(
        default=268_435_456,
        metadata=about(
            "Memory all produce requests being received or committed may hold together", integer(1)
        ),
    )
    max_concurrent_calls: int = field(
        default=512,
        metadata=about("Flight calls served at once (each holds a server thread)", integer(1)),
    )
    max_calls_per_connection: int = field(
        default=128,
        metadata=about("Flight calls one client connection may have open at once", integer(1)),
    )
    compression: str = field(
        default="none",
        metadata=about(
            "Object compression when the topic says 'producer' and the request names no codec",
            choice("none", "lz4", "zstd"),
        ),
    )
    tail_cache_bytes: int = field(
        default=67_108_864, metadata=about("Memory for recently committed batches", integer(0))
    )
    fetch_max_wait_ms: int = field(
        default=30_000, metadata=about("Upper bound on a fetch's long-poll wait", integer(0))
    )
    fetch_refresh_ms: int = field(
        default=200,
        metadata=about("How often a waiting fetch re-reads the root for other writers", integer(1)),
    )
    lease_interval_ms: int = field(
        default=1000, metadata=about("How often a broker renews its liveness lease", integer(10))
    )
    metadata_refresh_ms: int = field(
        default=1000,
        metadata=about(
            "How often a broker probes the cluster metadata log for changes (one GET)", integer(10)
        ),
    )
    lease_timeout_ms: int = field(
        default=6000, metadata=about("A broker whose lease is older than this is dead", integer(20))
    )
    replication_factor: int = field(
        default=1,
        metadata=about("Brokers serving each partition (leader + warm followers)", integer(1)),
    )
    force_leader: bool = field(
        default=False,
        metadata=about(
            "Fault injection only: lead every partition regardless of the live set", BOOLEAN
        ),
    )
    cleaner_interval_ms: int = field(
        default=300_000,
        metadata=about("Period of retention, compaction and GC; 0 disables", integer(0)),
    )
    cleaner_first_pass_spread_ms: int = field(
        default=3_600_000,
        metadata=about(
            "Window over which the cleaner first reads the led logs no client has touched "
            "since the broker started (or came to lead them), each at its topic's slot; "
            "retention of such a log is late by up to this much; 0: all in the first pass",
            integer(0, 86_400_000),
        ),
    )
    mirror_links: str = field(
        default="",
        metadata=about(
            "Mirror links this broker runs (comma-separated names of links in the root's "
            "metadata log, as `sparklog mirror run LINK` does); empty: none",
            TEXT,
        ),
    )
    gc_grace_ms: int = field(
        default=7_200_000,
        metadata=about(
            "Unreferenced objects older than this are deleted (>= the staged-object age limit)",
            integer(0),
        ),
    )
    group_min_session_timeout_ms: int = field(
        default=1000, metadata=about("Smallest session timeout a member may ask for", integer(1))
    )
    group_max_session_timeout_ms: int = field(
        default=1_800_000,
        metadata=about("Largest session timeout a member may ask for", integer(1)),
    )
    transaction_max_timeout_ms: int = field(
        default=900_000,
        metadata=about(
            "Largest transaction.timeout.ms a transactional producer may ask for", integer(1)
        ),
    )
    group_initial_rebalance_delay_ms: int = field(
        default=0,
        metadata=about("Wait for more members when an empty group gets its first", integer(0)),
    )
    consumer_group_session_timeout_ms: int = field(
        default=45_000,
        metadata=about(
            "KIP-848 groups: a member silent this long is expelled (Kafka's "
            "group.consumer.session.timeout.ms)",
            integer(1),
        ),
    )
    consumer_group_heartbeat_interval_ms: int = field(
        default=5_000,
        metadata=about(
            "KIP-848 groups: how often members are told to heartbeat (Kafka's "
            "group.consumer.heartbeat.interval.ms)",
            integer(1),
        ),
    )
    group_consumer_migration_policy: str = field(
        default="bidirectional",
        metadata=about(
            "Kafka's group.consumer.migration.policy: whether a classic group becomes a "
            "KIP-848 consumer group when a consumer-protocol member joins it (upgrade), and "
            "back when its last one leaves (downgrade)",
            choice("bidirectional", "upgrade", "downgrade", "disabled"),
        ),
    )
    group_poll_ms: int = field(
        default=50,
        metadata=about(
            "How often a waiting join or sync re-reads group state over storage (embedded "
            "coordinators); a broker parks waiting joins and syncs and does not poll",
            integer(1),
        ),
    )
    retry_timeout_ms: int = field(
        default=30_000, metadata=about("Client: how long calls retry retriable errors", integer(0))
    )
    metrics_listen: str = field(
        default="127.0.0.1:9815",
        metadata=about("Prometheus endpoint HOST:PORT; empty disables", address(disableable=True)),
    )
    metrics_resource_names: str = field(
        default="auto",
        metadata=about(
            "Whether the metrics endpoint's series name topics and groups (tenants' names, "
            "seen by anyone who can reach it): shown, hidden (summed over them), or auto "
            "(hidden where a listener authenticates, shown where none does)",
            choice("auto", "shown", "hidden"),
        ),
    )
    log_level: str = field(
        default="INFO", metadata=about("Log level", choice("DEBUG", "INFO", "WARNING", "ERROR"))
    )
    log_format: str = field(
        default="json", metadata=about("json (one object per line) or text", choice("json", "text"))
    )

    @property
    def flight_protocol(self) -> str:
        """The Flight listener's security protocol: its own key, else the Kafka listener's."""
        return self.flight_security_protocol or self.kafka_security_protocol

    @property
    def authenticates(self) -> bool:
        """Some listener of this broker asks its clients who they are (SASL or certificates)."""
        return any(
            _authenticating(protocol, self.ssl_client_auth)
            for protocol in (self.kafka_security_protocol, self.flight_protocol)
        )

    @property
    def metrics_names_hidden(self) -> bool:
        """The metrics endpoint sums its series over topics and groups (see the key)."""
        if self.metrics_resource_names == "auto":
            return self.authenticates
        return self.metrics_resource_names == "hidden"

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])


#: Every accepted key, from BrokerConfig's fields.
KEYS: dict[str, Setting] = settings_of(BrokerConfig)


def _check_consistency(values: Mapping[str, Any]) -> None:
    kafka_host = values["kafka_listen"].rpartition(":")[0]
    if kafka_host in ("0.0.0.0", "::", "[::]") and not values["kafka_advertised"]:
        raise InvalidConfigurationError(
            f"config key 'kafka_listen' = {values['kafka_listen']!r} listens on every interface, "
            "so Kafka clients cannot be told where to connect; set 'kafka_advertised' "
            "(SPARKLOG_KAFKA_ADVERTISED) to the HOST:PORT clients should use"
        )
    _check_security(values)
    delay = values["connection_failed_authentication_delay_ms"]
    if delay >= values["connections_max_idle_ms"]:
        raise InvalidConfigurationError(
            f"config key 'connection_failed_authentication_delay_ms' = {delay} is not accepted; "
            f"accepted: less than connections_max_idle_ms ({values['connections_max_idle_ms']}), "
            "as Kafka"
        )
    grace = values["gc_grace_ms"]
    if grace != 0 and grace < STAGED_OBJECT_MAX_AGE_MS:
        raise InvalidConfigurationError(
            f"config key 'gc_grace_ms' = {grace} is not accepted; accepted: 0 (tests only) or "
            f">= {STAGED_OBJECT_MAX_AGE_MS} (the age past which a staged object is never "
            "committed)"
        )
    if values["lease_timeout_ms"] <= values["lease_interval_ms"]:
        raise InvalidConfigurationError(
            f"config key 'lease_timeout_ms' = {values['lease_timeout_ms']} is not accepted; "
            f"accepted: more than lease_interval_ms ({values['lease_interval_ms']})"
        )
    session = values["consumer_group_session_timeout_ms"]
    if values["consumer_group_heartbeat_interval_ms"] >= session:
        raise InvalidConfigurationError(
            "config key 'consumer_group_heartbeat_interval_ms' = "
            f"{values['consumer_group_heartbeat_interval_ms']} is not accepted; accepted: less "
            f"than consumer_group_session_timeout_ms ({session})"
        )
    if values["group_max_session_timeout_ms"] < values["group_min_session_timeout_ms"]:
        raise InvalidConfigurationError(
            "config key 'group_max_session_timeout_ms' = "
            f"{values['group_max_session_timeout_ms']} is not accepted; accepted: at least "
            f"group_min_session_timeout_ms ({values['group_min_session_timeout_ms']})"
        )


def loopback(host: str) -> bool:
    """Whether ``host`` (of a HOST:PORT key) is a loopback address."""
    host = host.strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _authenticating(protocol: str, client_auth: str, *, every_client: bool = False) -> bool:
    """A listener of ``protocol`` asks who its clients are (SASL, or client certificates;
    ``every_client``: certificates are required, not only requested)."""
    wanted = ("required",) if every_client else ("requested", "required")
    return protocol.startswith("SASL_") or (protocol == "SSL" and client_auth in wanted)


def _check_listeners(values: Mapping[str, Any]) -> None:
    """Every door is one door: no listener without authentication off loopback, unless
    ``allow_insecure_listener`` says so (an authorizer covers Kafka and Flight)."""
    if values["allow_insecure_listener"]:
        return
    client_auth = values["ssl_client_auth"]
    flight = values["flight_security_protocol"] or values["kafka_security_protocol"]
    doors = [
        ("kafka_listen", "kafka_security_protocol", values["kafka_security_protocol"]),
        ("listen", "flight_security_protocol", flight),
    ]
    for key, protocol_key, protocol in doors:
        address = values[key]
        if not address or loopback(address.rpartition(":")[0]):
            continue
        if _authenticating(protocol, client_auth, every_client=True) or values["authorizer"]:
            continue
        how = (
            f"{protocol_key} = {protocol}"
            if protocol == "PLAINTEXT"
            else f"{protocol_key} = SSL with ssl_client_auth = {client_auth}"
        )
        raise InvalidConfigurationError(
            f"config key {key!r} = {address!r} is not a loopback address, and with {how} and "
            "no authorizer anyone who reaches it may read, write and delete every topic; set "
            f"{protocol_key} (SASL_SSL, SASL_PLAINTEXT, or SSL with ssl_client_auth = "
            'required) or authorizer = "acl", listen on 127.0.0.1, or set '
            "allow_insecure_listener = true (SPARKLOG_ALLOW_INSECURE_LISTENER) to accept that"
        )
    metrics = values["metrics_listen"]
    if metrics and not loopback(metrics.rpartition(":")[0]):
        raise InvalidConfigurationError(
            f"config key 'metrics_listen' = {metrics!r} is not a loopback address, and the "
            "metrics endpoint asks no one who they are while its series name every topic and "
            "group; accepted: a loopback HOST:PORT (127.0.0.1:9815, scraped through a proxy "
            'that authenticates), "" to disable, or allow_insecure_listener = true '
            "(SPARKLOG_ALLOW_INSECURE_LISTENER) to publish it anyway"
        )


def _check_security(values: Mapping[str, Any]) -> None:
    protocol = values["kafka_security_protocol"]
    _check_listeners(values)
    flight = values["flight_security_protocol"]
    if flight in ("SSL", "SASL_SSL") and not (values["ssl_certfile"] and values["ssl_keyfile"]):
        raise InvalidConfigurationError(
            f"config key 'flight_security_protocol' = {flight!r} needs ssl_certfile and "
            "ssl_keyfile (PEM files)"
        )
    if protocol in ("SSL", "SASL_SSL") and not (values["ssl_certfile"] and values["ssl_keyfile"]):
        raise InvalidConfigurationError(
            f"config key 'kafka_security_protocol' = {protocol!r} needs ssl_certfile and "
            "ssl_keyfile (PEM files)"
        )
    if values["ssl_client_auth"] != "none" and not values["ssl_cafile"]:
        raise InvalidConfigurationError(
            f"config key 'ssl_client_auth' = {values['ssl_client_auth']!r} needs ssl_cafile "
            "(the CA that signs client certificates)"
        )
    if bool(values["inter_broker_user"]) != bool(values["inter_broker_password"]):
        raise InvalidConfigurationError(
            "config keys 'inter_broker_user' and 'inter_broker_password' are not accepted "
            "one without the other; accepted: both set, or both empty"
        )
    for entry in values["super_users"].split(";"):
        if entry.strip() and not entry.strip().startswith("User:"):
            raise InvalidConfigurationError(
                f"config key 'super_users' entry {entry.strip()!r} is not accepted; accepted: "
                "principals User:NAME separated by ';'"
            )


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Defaults, then the TOML file, then SPARKLOG_* variables, then ``overrides``."""
    values: dict[str, Any] = {name: key.default for name, key in KEYS.items()}
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise InvalidConfigurationError(f"config file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidConfigurationError(
                f"config file {str(path)!r} is not valid TOML: {exc}"
            ) from None
        for name, raw in doc.items():
            key = KEYS.get(name)
            if key is None:
                raise InvalidConfigurationError(
                    unknown_key(name, "config key", KEYS, source=str(path))
                )
            values[name] = key.parse(raw, source=str(path), label="config key")
    environ = os.environ if env is None else env
    for name, key in KEYS.items():
        var = ENV_PREFIX + name.upper()
        if name == "storage_options":
            # the one spelling of every layer: SPARKLOG_STORAGE_<KEY>, over the file's table
            values[name] = merge_options(values[name], storage_options_from_env(environ))
        elif var in environ:
            values[name] = key.parse(environ[var], source=f"environment {var}", label="config key")
    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        key = KEYS.get(name)
        if key is None:
            raise InvalidConfigurationError(unknown_key(name, "config key", KEYS))
        values[name] = key.parse(raw, source="override", label="config key")
    _check_consistency(values)
    return BrokerConfig(**values)
