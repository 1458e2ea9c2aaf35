"""The notebooks execute top to bottom, and show what they teach: labelled plots, tables (not
object reprs), no Java/log4j/pandas warnings in the outputs, and no temp folders left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
NOISE = ("WARN", "Warning", "warning", "log4j", "Java", "Traceback")


def test_notebooks_are_committed_without_outputs():
    assert [p.name for p in NOTEBOOKS] == [
        "01_explore_topics.ipynb",
        "02_streaming_pipeline.ipynb",
        "03_reprocess_from_offsets.ipynb",
        "04_topic_to_delta.ipynb",
    ]
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_plot_has_a_title_and_axis_labels(path):
    notebook = nbformat.read(path, as_version=4)
    plotting = [c.source for c in notebook.cells if "plt.show()" in c.source]
    assert plotting, path.name
    for source in plotting:
        assert "title" in source and "set_xlabel" in source and "set_ylabel" in source, source


def _outputs(notebook: Any) -> list[tuple[str, Any]]:
    """(cell source, output) for every output of every code cell."""
    return [
        (cell.source, output)
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    ]


def _text(output: Any) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    return str(output.get("data", {}).get("text/plain", ""))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_shows_what_it_teaches(path, tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend: plots become outputs
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    )
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError naming the failing cell
    outputs = _outputs(notebook)
    assert not [o for _, o in outputs if o.get("output_type") == "error"]
    texts = "\n".join(_text(o) for _, o in outputs)
    noisy = [word for word in NOISE if word in texts]
    assert not noisy, f"{noisy} in the outputs of {path.name}"
    assert not [o for _, o in outputs if o.get("name") == "stderr"]
    images = [o for _, o in outputs if "image/png" in o.get("data", {})]
    tables = "\n".join(str(o.get("data", {}).get("text/html", "")) for _, o in outputs)
    # temp folders are removed (Spark's own scratch folders aside)
    assert not [p.name for p in temp.iterdir() if p.name.startswith("sparklog-nb-")]
    assert "removed" in texts
    if path.stem.startswith("01"):
        assert len(images) == 3  # records per minute, objects per linger.ms, lag
        assert "high watermark" in tables and "<table" in tables  # partitions as a table
        assert "PartitionInfo(" not in texts and "Description(" not in texts
        assert "linger_ms=50 wrote" in texts
        # the producer's first and last minutes are partial: left out of the plot, said so
        assert "left out, as partial: " in texts and "records)" in texts
        assert "nb-readers" in texts and "total lag" in texts
    elif path.stem.startswith("02"):
        assert len(images) == 1  # the lag falling while the query runs
        assert "input rows" in tables  # progress as a table, not a JSON dump
        assert "stopped; active queries: 0" in texts
        assert "rows read by the restarted query: 500" in texts
        assert "input 3500, output 3500, distinct source records 3500" in texts
    elif path.stem.startswith("03"):
        assert len(images) == 1
        assert "$ sparklog groups reset-offsets billing" in texts
        assert "dry run: nothing changed" in texts
        assert "records read again by group billing" in texts
    else:
        assert len(images) == 1  # revenue per minute, from the Delta table
        assert "last batch committed: 3" in texts  # 2,000 records, 500 a batch
        assert "revenue" in tables and "<table" in tables
        assert "rows in Delta 2500, records in the topic 2500, distinct records 2500" in texts
