"""How ObjectStore reports failures: outages, unknown outcomes and bugs are told apart.

* a failure before the request reached the store is a retriable
  ``StoreUnavailableError``;
* a create-only write whose answer was lost after the store applied it is a
  ``CommitStateUnknownError`` (never retried blindly), and when the transport's
  own retry finds the key taken by that very write, ``create`` reports success;
* a programming error propagates as itself and is never retried.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sparklog.errors import CommitStateUnknownError, StoreAccessError, StoreUnavailableError
from sparklog.retry import retrying
from sparklog.storage.objectstore import ObjectStore
from tests.support.s3 import MotoS3
from tests.support.tcp_proxy import FaultProxy


@pytest.fixture
def proxy(moto_s3: MotoS3) -> Iterator[FaultProxy]:
    parts = urlsplit(moto_s3.endpoint_url)
    lossy = FaultProxy.start((parts.hostname or "127.0.0.1", parts.port or 80))
    try:
        yield lossy
    finally:
        lossy.stop()


def _store_through(proxy: FaultProxy, moto_s3: MotoS3, attempts: int) -> tuple[ObjectStore, str]:
    """A store on a fresh bucket reached through ``proxy``, and its url (for a direct store)."""
    url = moto_s3.fresh_root()
    options = {
        **moto_s3.storage_options,
        "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": attempts, "mode": "standard"}},
    }
    return ObjectStore(url, options), url


def test_create_applied_but_answer_lost_is_commit_state_unknown(
    proxy: FaultProxy, moto_s3: MotoS3
) -> None:
    store, url = _store_through(proxy, moto_s3, attempts=1)
    store.create("warm-up", b"-")  # the connection pool is open; now lose every answer
    proxy.lose_next_answers(1_000)
    with pytest.raises(CommitStateUnknownError, match="may or may not have been created") as info:
        store.create("log/00000000000000000001.json", b"commit 1")
    assert not info.value.retriable
    assert info.value.details["key"] == "log/00000000000000000001.json"
    proxy.lose_next_answers(0)
    direct = ObjectStore(url, moto_s3.storage_options)
    # the store did apply it: re-reading (not retrying) is how the caller learns that
    assert direct.get("log/00000000000000000001.json") == b"commit 1"


def test_create_repeated_by_the_transport_after_a_lost_answer_reports_success(
    proxy: FaultProxy, moto_s3: MotoS3
) -> None:
    store, url = _store_through(proxy, moto_s3, attempts=3)
    store.create("warm-up", b"-")
    proxy.lose_next_answers(1)  # botocore repeats the PUT; the repeat meets If-None-Match
    assert store.create("log/00000000000000000001.json", b"commit 1") is True
    # a genuine lost race still reports False
    assert store.create("log/00000000000000000001.json", b"commit 1 by another writer") is False
    assert ObjectStore(url, moto_s3.storage_options).get("log/00000000000000000001.json") == (
        b"commit 1"
    )


def test_create_that_never_reached_the_store_is_retriable_unavailable(moto_s3: MotoS3) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = {
        **moto_s3.storage_options,
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
    }
    store = ObjectStore("s3://nowhere/root", options)
    with pytest.raises(StoreUnavailableError, match="failed to create 'k'") as info:
        store.create("k", b"v")
    assert info.value.retriable
    assert not isinstance(info.value, CommitStateUnknownError)


def test_programming_errors_propagate_as_themselves_and_are_not_retried(
    root_spec: tuple[str, dict],
) -> None:
    url, options = root_spec
    store = ObjectStore(url, options)
    calls: list[int] = []

    def write_a_non_bytes_value() -> None:
        calls.append(1)
        store.put("k", object())  # type: ignore[arg-type]

    with pytest.raises(TypeError):
        retrying(write_a_non_bytes_value, deadline_ms=5_000)
    assert calls == [1]
    with pytest.raises(TypeError):
        store.create("k", 42.5)  # type: ignore[arg-type]


def test_unknown_storage_option_is_named_as_a_configuration_error(moto_s3: MotoS3) -> None:
    options = {**moto_s3.storage_options, "client_kwargs": {"endpoint_uri": "http://x"}}
    with pytest.raises(ValueError, match=r"storage options \['client_kwargs', 'key', 'secret'\]"):
        ObjectStore(moto_s3.fresh_root(), options).get_or_none("k")


def test_a_missing_bucket_is_not_retried_and_names_the_credential_source(moto_s3: MotoS3) -> None:
    """Waiting never fixes a bucket name or a credential: no retry, and the error says
    which storage options supplied the credentials (by name, never their values)."""
    store = ObjectStore("s3://no-such-bucket-here/root", moto_s3.storage_options)
    calls = []

    def write() -> bool:
        calls.append(1)
        return store.create("k.json", b"{}")

    with pytest.raises(StoreAccessError) as info:
        retrying(write, deadline_ms=30_000)
    assert len(calls) == 1 and not info.value.retriable
    message = str(info.value)
    assert "no-such-bucket-here" in message and "storage options key, secret" in message
    assert moto_s3.storage_options["secret"] not in message


def test_a_local_commit_is_fsynced_before_it_gets_its_name(tmp_path, monkeypatch) -> None:
    """A machine crash must not leave a torn commit (it makes a whole shard unreadable).

    A machine crash cannot run here, so this watches the order of the calls that
    make it impossible: the temp file's fsync comes before the link, whatever the
    root's ``fsync`` setting (which adds the folder's fsync after the link)."""
    import os

    calls: list[str] = []
    real_fsync, real_link = os.fsync, os.link
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "link", lambda a, b: (calls.append("link"), real_link(a, b))[1])
    assert ObjectStore(f"file://{tmp_path}/plain").create("log/1.json", b"{}")
    assert calls == ["fsync", "link"]
    calls.clear()
    assert ObjectStore(f"file://{tmp_path}/durable", fsync=True).create("log/1.json", b"{}")
    assert calls == ["fsync", "link", "fsync"]
