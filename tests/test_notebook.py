"""The example notebook (examples/api.ipynb) runs from top to bottom."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "api.ipynb"


def test_the_example_notebook_runs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    src = str(NOTEBOOK.parents[1] / "src")
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = src + (os.pathsep + path if path else "")
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    finally:
        if path:
            os.environ["PYTHONPATH"] = path
        else:
            del os.environ["PYTHONPATH"]
    outputs = [cell.get("outputs", []) for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not any(o.get("output_type") == "error" for o in out) for out in outputs)
    # the last cell shows the sweep's table: one row per borrow limit
    table = outputs[-1][0]["data"]["text/plain"]
    assert "borrow_limit" in table and "none" in table and "25%" in table
