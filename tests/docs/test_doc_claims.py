"""Claims in the docs that no example runs, checked against the repository (issue 39):
how many notebooks there are, and what reading a Delta table with DuckDB needs.
(docs/mirroring.md's drill checks its own keys: its example runs in test_docs_examples.)"""

from __future__ import annotations

import re

from tests.docs.test_docs_examples import REPO

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def test_readme_counts_the_notebooks_there_are() -> None:
    count = len(list((REPO / "notebooks").glob("*.ipynb")))
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Notebooks") :]
    section = section[: section.index("\n## ", 1)]
    said = re.findall(rf"\b({'|'.join(NUMBERS)})\b", section)
    assert said, "the Notebooks section no longer counts them?"
    assert {word: NUMBERS[word] for word in said} == {word: count for word in said}


def test_duckdb_is_named_with_the_extension_it_downloads() -> None:
    """Wherever connect.md offers DuckDB as a Delta reader, it says the reader is DuckDB's
    ``delta`` extension, downloaded at run time (a machine without network has none)."""
    text = (REPO / "docs" / "connect.md").read_text()
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if "DuckDB" in p]
    assert paragraphs
    for paragraph in paragraphs:
        assert "extension" in paragraph and "download" in paragraph, paragraph
