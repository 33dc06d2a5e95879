"""The showcase's rule on the window it was chosen on and on windows it was not chosen on.

``fleetshare simulate``'s showcase is a sub-cluster of Helios Earth picked by a rule on the
trace's demand alone (``fleetshare.simulate.showcase.contending_teams``): the teams whose
demand exceeded their quota during at least 5% of the window. The rule and the window (days
13-16) were chosen looking at days 13-16; this script applies the same rule, unchanged, to the
other 3-day windows of May 2020 (held out) and runs the five fixed-cluster policies on each,
so that "the policies differ there" is checked on data the rule was not chosen on::

    .venv/bin/python bench/showcase_choice.py --out bench/results/showcase_choice.json

It also runs the showcase's own seven teams on the held-out windows. Per window and policy:
jobs within their team's quota at submission and their wait (p99, max), borrowed and lent
GPU-hours, preemptions (all; of work admitted within quota) and GPU-hours lost, and how many
distinct outcomes the five policies gave (``coinciding``'s test: equal on every figure a user
compares policies by). Deterministic: the same numbers on every run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fleetshare.simulate.report import outcome
from fleetshare.simulate.run import VariantResult, from_trace, run_variants
from fleetshare.simulate.showcase import SHOWCASE_CLUSTERS, SHOWCASE_WINDOW, contending_teams
from fleetshare.simulate.variants import select
from run_info import machine

POLICIES = ["static", "idle50", "borrow-quota", "fair-share", "no-fair-share"]
CHOSEN_ON = int(SHOWCASE_WINDOW["start_day"])
DAYS = SHOWCASE_WINDOW["days"]
HELD_OUT = [0, 4, 8, 16, 20, 24, 27]
"""The other 3-day windows of May (27-30 overlaps 24-27 by a day: May has 31)."""


def distinct(results: list[VariantResult]) -> int:
    """How many different outcomes the runs gave (``outcome``: equal on every figure a user
    compares policies by)."""
    return len({outcome(r) for r in results})


def same(results: list[VariantResult]) -> list[list[str]]:
    """The groups of policies that came out the same (two or more)."""
    groups: dict[str, list[str]] = {}
    for r in results:
        groups.setdefault(outcome(r), []).append(r.name)
    return [names for names in groups.values() if len(names) > 1]


def row(r: VariantResult) -> dict[str, Any]:
    c = r.cluster
    return {
        "in_quota_jobs": c["in_quota_jobs"],
        "in_quota_wait_p99_s": c["in_quota_wait_seconds"]["p99"],
        "in_quota_wait_max_s": c["in_quota_wait_seconds"]["max"],
        "borrowed_gpu_hours": round(c["borrowed_hours"], 1),
        "lent_gpu_hours": round(c["lent_hours"], 1),
        "preemptions": c["preemptions"],
        "preemptions_in_quota": c["preemptions_in_quota"],
        "lost_gpu_hours": round(c["lost_hours"], 1),
        "wait_p99_s": c["queue_wait_seconds"]["p99"],
        "useful_allocation": c["useful_allocation"],
        "run_seconds": round(r.run_seconds, 2),
    }


def window(start_day: int, teams: list[str], jobs: int) -> dict[str, Any]:
    """The five fixed-cluster policies on ``teams`` over days ``start_day`` to +3."""
    inp = from_trace("helios", {"start_day": start_day, "days": DAYS, "clusters": teams})
    results = run_variants(inp, select(POLICIES), jobs=jobs)
    return {
        "start_day": start_day,
        "teams": teams,
        "quota_gpus": inp.facts["quota_gpus"],
        "jobs": len(inp.workloads),
        "distinct_outcomes": distinct(results),
        "came_out_the_same": same(results),
        "policies": {r.name: row(r) for r in results},
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per window."""

    def hours(s: float | None) -> str:
        return "-" if s is None else f"{s / 3600:.1f}h"

    out = [
        "| days | rule | teams (GPUs) | distinct of 5 (the same) | in-quota wait max static / "
        "idle50 / fair-share / no-fair-share | borrowed GPU-h (same order, no static) | "
        "preemptions | lost GPU-h |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in rows:
        p = w["policies"]
        shared = ["idle50", "fair-share", "no-fair-share"]
        out.append(
            f"| {w['start_day']}-{w['start_day'] + DAYS:g} | {w['rule']} | "
            f"{len(w['teams'])} ({w['quota_gpus']}) | {w['distinct_outcomes']}"
            + "".join(f" ({', '.join(g)})" for g in w["came_out_the_same"])
            + " | "
            + " / ".join(hours(p[n]["in_quota_wait_max_s"]) for n in ["static", *shared])
            + " | "
            + " / ".join(f"{p[n]['borrowed_gpu_hours']:,.0f}" for n in shared)
            + " | "
            + " / ".join(str(p[n]["preemptions"]) for n in shared)
            + " | "
            + " / ".join(f"{p[n]['lost_gpu_hours']:,.0f}" for n in shared)
            + " |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/showcase_choice.json"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    rows = []
    for start in [CHOSEN_ON, *HELD_OUT]:
        teams = contending_teams(start, DAYS)
        rule = "chosen on" if start == CHOSEN_ON else "held out"
        rows.append({**window(start, teams, args.jobs), "rule": f"{rule}: contending teams"})
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr)
    for start in HELD_OUT:
        rows.append(
            {
                **window(start, list(SHOWCASE_CLUSTERS), args.jobs),
                "rule": "held out: the showcase's 7 teams",
            }
        )
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr)
    data = {
        "what": __doc__.split("\n")[0],
        "rule": "teams whose demand exceeded their quota in >= 5% of the window",
        "chosen_on": f"days {CHOSEN_ON}-{CHOSEN_ON + DAYS:g}",
        "policies": POLICIES,
        "windows": rows,
        "wall_seconds": round(time.perf_counter() - began, 1),
        "machine": machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table(rows) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
