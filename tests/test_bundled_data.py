"""The main job runs from a clone or an installed package: no ``../shared`` beside it.

The trace files ship inside the package (``fleetshare/data/traces``); these tests run the
package from a copy in a temporary folder, where no reference data sits next to it, and check
that the packaging rules carry every bundled file into a wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fleetshare.traces import TRACES
from fleetshare.traces.common import BUNDLED_DATA, DATA_ENV, data_root

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "fleetshare"
MAX_FILE_BYTES = 1_000_000
STATIC_JSON = ("-p", "static", "--json", "--jobs", "1")


def bundled_files() -> list[Path]:
    return sorted(p for p in BUNDLED_DATA.rglob("*") if p.is_file())


def test_default_data_is_the_bundled_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_ENV, raising=False)
    assert data_root() == BUNDLED_DATA
    assert BUNDLED_DATA.is_relative_to(PACKAGE)


def test_override_still_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_root() == tmp_path
    assert data_root("elsewhere") == Path("elsewhere")


def test_every_bundled_file_is_small_attributed_and_packaged() -> None:
    files = bundled_files()
    folders = {p.relative_to(BUNDLED_DATA).parts[0] for p in files if p.parent != BUNDLED_DATA}
    assert folders == {
        "alibaba-dlrm",
        "alibaba-gpu-v2023",
        "azure-llm-2023",
        "helios-earth",
        "philly",
    }
    readme = (BUNDLED_DATA / "README.md").read_text(encoding="utf-8")
    for folder in folders:
        assert f"`{folder}/`" in readme, f"{folder} has no attribution row"
    assert "CC BY 4.0" in readme
    for path in files:
        assert path.stat().st_size < MAX_FILE_BYTES, path
    # The wheel takes what pyproject's package-data globs match (relative to the package).
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["fleetshare"]
    packaged = {p for pattern in patterns for p in PACKAGE.glob(pattern)}
    missing = [str(p.relative_to(PACKAGE)) for p in files if p not in packaged]
    assert not missing, f"not in package-data: {missing}"


def test_simulate_runs_from_a_copy_with_no_shared_data(tmp_path: Path) -> None:
    """`fleetshare simulate` on every trace, from a copy of the package alone."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "fleetshare", ignore=shutil.ignore_patterns("__pycache__"))
    # Where a source checkout would find ../shared/data relative to the package copy: nothing.
    assert not (site / ".." / ".." / "shared" / "data").exists()
    env = {k: v for k, v in os.environ.items() if k != DATA_ENV}
    env["PYTHONPATH"] = str(site)
    code = "import sys; from fleetshare.cli import app; sys.argv[0] = 'fleetshare'; app()"
    window = {"helios": ["--days", "0.02"], "philly": ["--days", "0.02"], "alibaba": []}
    window["dlrm"] = ["--days", "0.01"]
    for trace, days in window.items():
        assert trace in TRACES
        done = subprocess.run(
            [sys.executable, "-c", code, "simulate", "--trace", trace, *days, *STATIC_JSON],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout)
        assert result["input"]["facts"]["trace"] == trace
    loaded_from = subprocess.run(
        [sys.executable, "-c", "import fleetshare; print(fleetshare.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(loaded_from).is_relative_to(site), loaded_from
