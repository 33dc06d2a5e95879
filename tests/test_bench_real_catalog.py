"""bench/provisioning_real_catalog.py runs, its plans pass the checks and its gangs stay on one
host (a small size, so the suite stays quick)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "provisioning_real_catalog.py"


def test_the_bench_runs_small_and_keeps_every_gang_on_one_host(tmp_path: Path) -> None:
    if str(SCRIPT.parent) not in sys.path:  # as when run as a script: its helpers beside it
        sys.path.insert(0, str(SCRIPT.parent))
    import provisioning_real_catalog as bench

    out = tmp_path / "r.json"
    argv = ["--sizes", "100", "--repeat", "2", "--capacity", "on-demand", "--out", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [r["gangs"] for r in rows] == [False, True]
    for r in rows:
        assert r["plan_valid"] and r["pods_not_planned"] == 0
        assert r["deterministic"] is True
        assert r["gangs_in_one_domain"] == r["gangs_planned"]
    assert rows[1]["gangs_planned"] == 100 // 5 // 8
    assert report["targets"]["gangs_kept_together"]
