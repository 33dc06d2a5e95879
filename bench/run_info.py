"""Where and on what code a benchmark ran: shared by the scripts in ``bench/``."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def git(*argv: str) -> str | None:
    """``git argv`` in the repository, its output (None when git is missing or fails)."""
    try:
        out = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def machine(**versions: str | None) -> dict[str, Any]:
    """The machine, the commit and whether ``src/`` had local changes, and library versions
    (numpy always; ``versions`` adds others). The load average: the machine may be shared."""
    status = git("status", "--porcelain", "--", "src")
    return {
        "git_commit": git("rev-parse", "--short", "HEAD"),
        "src_modified": None if status is None else bool(status),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "processor": platform.processor() or platform.machine(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": np.__version__,
        **versions,
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, from ``/proc/<pid>/stat`` (None when
    it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14, 15)
