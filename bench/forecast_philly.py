"""Warm capacity ahead of forecast demand vs the reactive autoscaler, on Philly Dec 1-14 2017.

Runs ``fleetshare simulate --trace philly --start-day 59 --days 14 -o resolution_minutes=10
-p static-autoscale`` twice -- reactive, and with ``--warm-capacity`` (the forecaster seeded
with the seven days before the window, as CES trained on the weeks before its test span) --
and writes paid utilisation, under-provision events, GPU-hours short of capacity and cost side
by side with Helios' published CES figures (88.8 %, 6 events), with the machine::

    .venv/bin/python bench/forecast_philly.py --out bench/results/forecast_philly.json

``--resolution-minutes 1`` runs the trace as recorded (ten times the jobs; results in
``bench/results/forecast_philly_1min.json``).

Philly has one team holding every GPU, so every sharing policy is the same here;
``resolution_minutes=10`` gives each 10-minute step the peak of the active-node curve, the
aggregation CES used (see ``docs/simulate.md``, "Warm capacity", for what else differs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from run_info import machine

START_DAY = 59  # 2017-12-01: the trace starts 2017-10-03
DAYS = 14
WARM = {
    "quantile": 0.99,
    "hold_seconds": 3600,
    "burst_seconds": 3600,
    "margin": 0.015,
    "pod": {"nvidia.com/gpu": 8},
}
HISTORY_DAYS = 7
CES = {"utilisation": 0.888, "under_provision_events": 6}
KEYS = (
    "utilisation_of_paid",
    "under_provision_events",
    "under_provisioned_jobs",
    "under_provisioned_hours",
    "under_provision_span_hours",
    "cost_usd",
    "nodes_launched",
    "peak_nodes",
    "node_hours",
    "first_wait_seconds",
    "run_seconds",
    "run_cpu_seconds",
)


def run(warm: bool, resolution: int = 10) -> dict[str, Any]:
    """One run: the cluster metrics of ``static-autoscale`` (reactive or warm)."""
    from fleetshare.autoscaling.warm import WarmCapacity
    from fleetshare.simulate.metrics import under_provision
    from fleetshare.simulate.run import demand_before, from_trace, run_variant
    from fleetshare.simulate.variants import VARIANTS

    opts: dict[str, Any] = {"start_day": START_DAY, "days": DAYS, "resolution_minutes": resolution}
    inp = from_trace("philly", opts)
    if warm:
        history = demand_before("philly", opts, HISTORY_DAYS, inp.resource)
        inp.warm_capacity = WarmCapacity.model_validate({**WARM, "history": history})
    result = run_variant(inp, VARIANTS["static-autoscale"])
    cluster = result.to_json()["cluster"]
    row = {key: cluster[key] for key in KEYS}
    # the cluster starts with no nodes: the work running at t=0 waits for the first launches
    # (CES starts with the active nodes plus its buffer powered on); the events after that
    m = result.measured
    later = np.where(m.short_since > 0, m.short_since, np.nan)
    after = under_provision(later, m.first_admit, m.amount, m.end)
    row["under_provision_events_after_start"] = after.events
    row["under_provisioned_hours_after_start"] = round(after.hours, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument(
        "--resolution-minutes", type=int, default=10, help="the trace's step (1: as recorded)"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        reactive, warm = pool.map(run, [False, True], [args.resolution_minutes] * 2)
    rows = {"reactive": reactive, "forecast warm capacity": warm}
    for name, row in rows.items():
        print(
            f"{name:24} paid util {row['utilisation_of_paid']:.1%}  "
            f"under-provision events {row['under_provision_events']:>5} "
            f"({row['under_provision_events_after_start']} after the start)  "
            f"GPU-h short {row['under_provisioned_hours']:>9,.1f}  "
            f"cost ${row['cost_usd']:>12,.0f}  nodes launched {row['nodes_launched']:>5}",
            flush=True,
        )
    print(
        f"{'CES (Helios paper)':24} paid util {CES['utilisation']:.1%}  "
        f"under-provision events {CES['under_provision_events']:>5}"
    )
    if args.out is not None:
        import statsmodels

        result = {
            "benchmark": "forecast_philly",
            "command": "fleetshare simulate --trace philly --start-day 59 --days 14 "
            f"-o resolution_minutes={args.resolution_minutes} -p static-autoscale "
            "[--warm-capacity ...]",
            "resolution_minutes": args.resolution_minutes,
            "warm_capacity": WARM,
            "history_days": HISTORY_DAYS,
            "ces_published": CES,
            "machine": machine(statsmodels=statsmodels.__version__),
            "wall_seconds": round(time.perf_counter() - began, 1),
            "results": rows,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
