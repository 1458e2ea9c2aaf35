"""A versioned document written often keeps a bounded history (``update(keep=...)``).

A connector saves its progress every few seconds as a new version; without a
bound its folder grew by a file per save, and every save listed all of them.
"""

from __future__ import annotations

from sparklog.connect import state
from sparklog.storage import open_root
from sparklog.storage.documents import VersionedDocument


def test_update_with_keep_holds_at_most_keep_versions(root_spec) -> None:
    url, options = root_spec
    root = open_root(url, options, create=True)
    doc = VersionedDocument(root.store, "docs/progress")
    for n in range(12):
        doc.update(lambda old, n=n: {"n": n}, keep=3)
    assert doc.versions() == [9, 10, 11]
    assert doc.latest() == (11, {"n": 11})
    unbounded = VersionedDocument(root.store, "docs/history")
    for n in range(5):
        unbounded.update(lambda old, n=n: {"n": n})
    assert unbounded.versions() == [0, 1, 2, 3, 4]  # without keep, every version stays


def test_a_connectors_state_keeps_a_bounded_history(tmp_path) -> None:
    root = open_root(f"file://{tmp_path}/root", create=True)
    for n in range(3 * state.STATE_VERSIONS_KEPT):
        state.save(root, "pg-orders", lsn=n)
    assert state.load(root, "pg-orders")["lsn"] == 3 * state.STATE_VERSIONS_KEPT - 1
    kept = root.store.list_names(f"{state.PREFIX}/pg-orders")
    assert len(kept) == state.STATE_VERSIONS_KEPT
