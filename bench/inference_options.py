"""Benchmark: capacity options for an inference service on the same traffic (issue 17).

Runs ``fleetshare simulate`` 's comparison on the bundled ``inference-viral-ramp`` and
``inference-diurnal`` scenarios: purely reactive, warm headroom (placeholder pods), scheduled
floors (office hours), forecast pre-provisioning and all three together. Writes per scenario
the metrics (JSON), a summary table (Markdown) and the charts (trade-off of capacity-short
minutes against extra GPU-hours; serving capacity against traffic), with the machine it ran
on. Each scenario runs twice: as bundled (GPU nodes boot with the service's image preloaded,
``startup.preloaded_pools``) and with that setting removed (``-pull``: a replica on a new
node pulls the image first), so the preloaded image's share of the result shows. The
issue's target on the viral ramp: at least 5x fewer capacity-short minutes than reactive for at
most 10% more GPU-hours; the summary says which option, if any, meets it.

    .venv/bin/python bench/inference_options.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from fleetshare.cli import bundled_scenarios
from fleetshare.simulate.service_charts import write_charts
from fleetshare.simulate.service_compare import compare, to_json
from run_info import machine

SCENARIOS = ("inference-viral-ramp", "inference-diurnal")
TARGET_FEWER = 5.0
TARGET_EXTRA_PERCENT = 10.0


def meets(row: dict[str, Any]) -> bool:
    """The issue's target for one option (relative to reactive)."""
    fewer = row["fewer_capacity_short_minutes_x"]
    extra = row["extra_gpu_hours_percent"]
    better = fewer is None or fewer >= TARGET_FEWER  # None: no capacity-short minute at all
    return better and extra is not None and extra <= TARGET_EXTRA_PERCENT


def summary(name: str, data: dict[str, Any], seconds: float) -> list[str]:
    lines = [
        f"## {name} ({seconds:.1f} s for all options)",
        "",
        "| option | capacity-short min | x fewer than reactive | GPU-h | extra GPU-h | "
        "time to capacity p50 / p99 s | headroom GPU-h | cost $ | perfect-foresight $ | "
        "meets target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for option, row in data["versus_reactive"].items():
        o = data["options"][option]
        s = next(iter(o["services"].values()))
        ttc = s["time_to_capacity_seconds"]
        lines.append(
            f"| {option} | {row['capacity_short_minutes']} | "
            f"{row['fewer_capacity_short_minutes_x']} | "
            f"{o['cluster']['gpu_hours']} | {row['extra_gpu_hours']:+} "
            f"({row['extra_gpu_hours_percent']:+}%) | {ttc['p50']} / {ttc['p99']} | "
            f"{s['headroom_gpu_hours']} | {o['cluster']['cost']} | "
            f"{o['cluster']['perfect_foresight_cost']} | {'yes' if meets(row) else 'no'} |"
        )
    return [*lines, ""]


def without_preloading(path: Path, into: Path) -> Path:
    """A copy of the scenario at ``path`` whose services pull their image on every new node."""
    data = yaml.safe_load(path.read_text())
    for service in data.get("services", []):
        service.get("startup", {}).pop("preloaded_pools", None)
    out = into / f"{path.stem}-pull.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    paths = {p.stem: p for p in bundled_scenarios()}
    report: dict[str, Any] = {"machine": machine(), "scenarios": {}}
    md = [
        "# Inference capacity options (issue 17)",
        "",
        f"Target on the viral ramp: >= {TARGET_FEWER:g}x fewer capacity-short minutes than "
        f"reactive for <= {TARGET_EXTRA_PERCENT:g}% more GPU-hours. Definitions: "
        "docs/inference.md. Command: `python bench/inference_options.py --out bench/results`.",
        "",
    ]
    tmp = Path(tempfile.mkdtemp())
    runs = [(name, paths[name]) for name in SCENARIOS]
    runs += [(f"{name}-pull", without_preloading(paths[name], tmp)) for name in SCENARIOS]
    for name, path in runs:
        start = time.perf_counter()
        results, notes = compare(path)
        seconds = time.perf_counter() - start
        data = to_json(name, results, notes)
        data["seconds"] = round(seconds, 2)
        data["meets_target"] = [o for o, row in data["versus_reactive"].items() if meets(row)]
        report["scenarios"][name] = data
        md += summary(name, data, seconds)
        write_charts(args.out, name, results)
    (args.out / "inference_options.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "inference_options.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
