"""What the command line writes, as a script reads it through a pipe (issue 28, item 4): an
error is one unwrapped line, whatever its length; a table keeps every column; amounts print
in units and times with their zone. The commands run as subprocesses with their output piped
and no ``COLUMNS``, as in a shell script or CI log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fleetshare.cli import _amounts, _when

LONG = "a-folder-name-long-enough-that-any-path-under-it-passes-eighty-columns-on-its-own"


def piped(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "fleetshare.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_an_error_is_one_line_however_long(tmp_path: Path) -> None:
    folder = tmp_path / LONG
    folder.mkdir()
    out = folder / "report.html"
    out.write_text("not a folder")
    result = piped("simulate", "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: --out {out}: exists and is not a folder"]


def test_a_usage_error_is_one_line_however_long() -> None:
    option = f"--{LONG}"
    result = piped("simulate", option)
    assert result.returncode == 2
    assert f"Error: No such option: {option}" in result.stderr.splitlines()
    assert "╭" not in result.stderr  # not typer's box, which wraps at 80 columns in a pipe


def test_a_piped_table_keeps_every_column() -> None:
    result = piped("scenario", "run", "hyperpod-walkthrough")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if "┃ workload" in line)
    for column in ("workload", "team", "state", "admitted", "finished", "preemptions"):
        assert column in header
    # the longest row is whole: quota, used and borrowed of a team, each in units
    team_b = next(line for line in result.stdout.splitlines() if line.startswith("│ team-b"))
    assert "cpu=63.7, memory=231.08Gi, nvidia.com/gpu=2" in team_b
    assert "cpu=8, memory=32Gi, nvidia.com/gpu=2" in team_b


def test_amounts_print_in_units() -> None:
    # the API sends base units: bytes of memory, cores of CPU, whole GPUs
    amounts = {"cpu": 63.7, "memory": 248_118_000_000, "nvidia.com/gpu": 2, "cpu-small": 0.5}
    assert _amounts(amounts) == "cpu=63.7, memory=231.08Gi, nvidia.com/gpu=2, cpu-small=500m"
    assert _amounts({"memory": 32 * 2**30}) == "memory=32Gi"


def test_times_carry_their_zone() -> None:
    assert _when(0) == "1970-01-01 00:00:00 UTC"
    assert _when("2026-12-06T20:26:29.5Z") == "2026-12-06 20:26:29 UTC"
    assert _when("2026-12-06T21:26:29+01:00") == "2026-12-06 20:26:29 UTC"
    assert _when(None) == "" and _when("") == ""
