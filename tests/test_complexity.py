"""Each function above complexity 15 is listed with why it stays in docs/architecture.md
("Complexity"; `make lint` keeps every one at 25 or below, pyproject.toml's C901): ruff's
C901 at 15 and that list name the same functions, so the list cannot drift."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
HEADING = "## Complexity"
LISTED = re.compile(r"^- `((?:src|tests|bench|scripts)/[\w/]+\.py)` `(\w+)`: \S", re.MULTILINE)
LINTED = ("src", "tests", "bench", "scripts")
"""What `make lint` checks."""


def above(limit: int) -> Counter[tuple[str, str]]:
    """(file, function) of every function ``make lint`` checks above ``limit``, as ruff's C901
    finds them."""
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--exit-zero",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={limit}",
            "--output-format",
            "json",
            *LINTED,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    out: Counter[tuple[str, str]] = Counter()
    for item in json.loads(found.stdout):
        name = re.match(r"`(\w+)` is too complex", item["message"])
        assert name is not None, item["message"]
        out[Path(item["filename"]).relative_to(ROOT).as_posix(), name.group(1)] += 1
    return out


def documented() -> Counter[tuple[str, str]]:
    """(file, function) of every entry of the documented list."""
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{DOC.name} has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    return Counter(LISTED.findall(section))


def test_every_function_above_15_is_listed_with_why() -> None:
    found, listed = above(15), documented()
    missing = sorted((found - listed).elements())
    stale = sorted((listed - found).elements())
    assert not missing and not stale, (
        f"docs/architecture.md, {HEADING}: add {missing} (one line: why it stays), "
        f"remove {stale} (now at 15 or below)"
    )
