"""Group ids as storage keys: any non-empty id, reversible, old ids unchanged (issue 24 item 4)."""

from __future__ import annotations

import pytest

from sparklog.errors import InvalidGroupIdError
from sparklog.storage.groups import (
    GroupStore,
    decode_group_key_name,
    group_key,
    group_key_name,
)
from sparklog.storage.objectstore import ObjectStore


@pytest.mark.parametrize("group", ["g1", "billing.v2", "A-b_c", "x" * 249])
def test_ids_accepted_before_keep_their_keys(group: str) -> None:
    assert group_key(group) == f"groups/{group}"


@pytest.mark.parametrize(
    "group", ["my group", "team:app", "app/v1", "grupo-ñ", "a@b", "!", "%2F", ".", "..", "a!21"]
)
def test_other_ids_are_escaped_reversibly(group: str) -> None:
    name = group_key_name(group)
    assert all(c.isascii() and (c.isalnum() or c in "._-!") for c in name)
    assert name not in (".", "..")
    assert decode_group_key_name(name) == group


def test_empty_id_is_refused() -> None:
    with pytest.raises(InvalidGroupIdError, match="any non-empty string"):
        group_key_name("")


def test_long_ids_are_hashed_and_still_listed(tmp_path) -> None:
    store = GroupStore(ObjectStore(f"file://{tmp_path}"))
    long_id = "ñ" * 250
    assert len(group_key_name(long_id)) <= 249
    store.commit(long_id, {("t", 0): 4})
    store.commit("team:app", {("t", 0): 2})
    assert store.list_groups() == sorted([long_id, "team:app"])
    assert store.fetch(long_id)[("t", 0)].offset == 4
    store.delete(long_id)
    assert store.list_groups() == ["team:app"]
