"""Benchmark: replay whole traces through the scenario runner.

The issue's targets (2-core machine): the Kueue scheduler-perf generator trace (15,000
workloads, 30 teams in 5 cohorts, 5 nodes) in at most 10 s, the Alibaba GPU 2023 trace (8,151
pods, 1,213 nodes, 149 days) in at most 20 s, a Helios month (16 teams, 31 days) in at most
60 s, each below 2 GiB of memory.

Each trace runs in a fresh subprocess (``--one NAME``) so that the peak RSS reported belongs to
that trace only. The trace is loaded (not timed), turned into a scenario with the trace's own
nodes, policy and workloads, and ``Runner(scenario).run()`` is timed.

Besides time and memory, every run reports what was decided, so a speed-up can be checked for
changing nothing: counts (admitted, preempted, finished, events) and ``outcome_sha256``, a
digest of every workload's admission / finish times and preemptions. For the Kueue generator it
also prints the numbers Kueue's own benchmark reports: average usage (time-weighted CPU in use
/ total nominal quota, from the first submission to the last finish) and the mean time to
admission (first admission - submit) per workload class.

    .venv/bin/python bench/simulate_speed.py                      # all three, JSON to stdout
    .venv/bin/python bench/simulate_speed.py --trace alibaba      # one trace
    .venv/bin/python bench/simulate_speed.py --out bench/results/simulate_speed.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kueue_measures import Observed, kueue_measures
from run_info import machine

TRACES: dict[str, dict[str, Any]] = {
    "kueue-generator": {"options": {}, "target_s": 10.0},
    "alibaba": {"options": {}, "target_s": 20.0},
    "helios": {"options": {"days": 31.0}, "target_s": 60.0},
}
TRACE_POLICY = "trace"
"""The trace's own policy (its teams and quotas as the loader made them)."""
MEMORY_TARGET_MIB = 2048.0


def _max_rss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def outcome_digest(result: Any) -> str:
    """A digest of what was decided for every workload (times, preemptions, placement)."""
    h = hashlib.sha256()
    for name in sorted(result.records):
        r = result.records[name]
        preemptions = [(p["at"], p["by"], p["reason"]) for p in r.preemptions]
        row = (name, r.state, r.first_admitted_at, r.admitted_at, r.finished_at, preemptions)
        h.update(repr(row).encode())
        h.update(repr((r.flavors, r.placement, sorted(r.borrowed.items()))).encode())
    return h.hexdigest()


def events_digest(result: Any) -> str:
    """A digest of the whole event log (the JSON contract's ``events``)."""
    h = hashlib.sha256()
    for event in result.events:
        h.update(json.dumps(event, sort_keys=True, default=str).encode())
    return h.hexdigest()


def kueue_metrics(result: Any, nominal_cpu: float) -> dict[str, Any]:
    """Kueue's benchmark numbers (:mod:`kueue_measures`: Kueue's recorder's definitions) of a
    simulator run: a workload is created at its submission, admitted at each ``admit`` event
    and released at its ``finish`` or ``preempt``. Kueue's usage window runs from the
    ClusterQueues' first status event (they exist before the workloads are created) to their
    last; here from the first submission to the last release, which Kueue's window contains.
    """
    from fleetshare.model.resources import CPU
    from fleetshare.traces.kueue_generator import CLASS_LABEL

    spans: dict[str, list[list[float | None]]] = {name: [] for name in result.records}
    for event in result.events:
        name = event.get("workload")
        if event["event"] == "admit":
            spans[name].append([float(event["at"]), None])
        elif (
            event["event"] in ("finish", "preempt")
            and spans.get(name)
            and spans[name][-1][1] is None
        ):
            spans[name][-1][1] = float(event["at"])
    observed = [
        Observed(
            cls=r.workload.labels.get(CLASS_LABEL, "?"),
            cpu=r.workload.total_requests().get(CPU, 0) / 1000,
            created=r.workload.submit_time,
            admissions=[(float(a), b) for a, b in spans[name] if a is not None],
            runtime=r.workload.duration or 0.0,
        )
        for name, r in result.records.items()
    ]
    return kueue_measures(observed, nominal_cpu)


def measure_one(
    name: str, options: dict[str, Any], profile: str | None, variant: str = TRACE_POLICY
) -> dict[str, Any]:
    """Load one trace and time its replay (in this process), under the trace's own policy or
    one of ``fleetshare simulate``'s policy variants."""
    from fleetshare.model.catalog import load_catalog
    from fleetshare.scenario.loader import Scenario
    from fleetshare.scenario.runner import Runner
    from fleetshare.scenario.schema import ScenarioSpec
    from fleetshare.simulate.run import build_scenario, from_trace
    from fleetshare.simulate.variants import select
    from fleetshare.traces import load_trace

    t0 = time.perf_counter()
    catalog = load_catalog()
    tr = load_trace(name, **options)
    policy = tr.load_policy()
    if variant == TRACE_POLICY:
        spec = ScenarioSpec.model_validate({"cluster": {"nodes": []}, "policy": {}})
        sc = Scenario(name, "", tr.nodes, [], policy, tr.workloads, [], None, {}, catalog, spec)
    else:
        inp = from_trace(name, options, catalog=catalog)
        sc = build_scenario(inp, select([variant])[0], catalog)
    load_s = time.perf_counter() - t0
    rss_loaded = _max_rss_mib()
    t0 = time.perf_counter()
    c0 = time.process_time()
    if profile:
        import cProfile

        prof = cProfile.Profile()
        res = prof.runcall(Runner(sc).run)
        prof.dump_stats(profile)
    else:
        res = Runner(sc).run()
    run_s = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    records = res.records.values()
    kinds: dict[str, int] = {}
    for event in res.events:
        kinds[event["event"]] = kinds.get(event["event"], 0) + 1
    out: dict[str, Any] = {
        "trace": name,
        "policy": variant,
        "options": options,
        "nodes": len(tr.nodes),
        "workloads": len(tr.workloads),
        "teams": len(policy.teams),
        "load_s": round(load_s, 3),
        "run_s": round(run_s, 3),
        "cpu_s": round(cpu_s, 3),
        "max_rss_mib_after_load": round(rss_loaded, 1),
        "max_rss_mib": round(_max_rss_mib(), 1),
        "end_time": res.end_time,
        "admitted_ever": sum(1 for r in records if r.first_admitted_at is not None),
        "finished": sum(1 for r in records if r.finished_at is not None),
        "preemptions": sum(len(r.preemptions) for r in records),
        "never_admitted": sum(1 for r in records if r.first_admitted_at is None),
        "events": len(res.events),
        "event_kinds": dict(sorted(kinds.items())),
        "outcome_sha256": outcome_digest(res),
        "events_sha256": events_digest(res),
    }
    if name == "kueue-generator" and variant == TRACE_POLICY:
        out["kueue"] = kueue_metrics(res, float(tr.facts["nominal_cpu"]))
    return out


def run_sub(name: str, options: dict[str, Any], timeout: float, variant: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", name, "--options", json.dumps(options)]
    cmd += ["--variant", variant]
    failed = {"trace": name, "policy": variant, "options": options}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**failed, "error": f"timed out after {timeout:g} s"}
    if proc.returncode != 0:
        return {**failed, "error": proc.stderr.strip()[-2000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace",
        action="append",
        choices=sorted(TRACES),
        help="trace to replay (repeatable; default: all three)",
    )
    parser.add_argument("--days", type=float, help="override the trace's window (days)")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per trace")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help="with one --trace: cProfile the run into this file")
    parser.add_argument(
        "--variant",
        action="append",
        help=f"policy: '{TRACE_POLICY}' (the trace's own) or a `fleetshare simulate` variant "
        f"(repeatable; default: {TRACE_POLICY})",
    )
    args = parser.parse_args(argv)
    variants = args.variant or [TRACE_POLICY]

    if args.one:
        row = measure_one(args.one, json.loads(args.options), args.profile, variants[0])
        print(json.dumps(row))
        return 0
    names = args.trace or list(TRACES)
    if args.profile:
        if len(names) != 1:
            parser.error("--profile needs exactly one --trace")
        options = dict(TRACES[names[0]]["options"])
        if args.days is not None:
            options["days"] = args.days
        print(json.dumps(measure_one(names[0], options, args.profile, variants[0]), indent=2))
        return 0
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for name, variant in ((n, v) for n in names for v in variants):
        options = dict(TRACES[name]["options"])
        if args.days is not None:
            options["days"] = args.days
        row = run_sub(name, options, args.timeout, variant)
        target = TRACES[name]["target_s"]
        if "error" not in row:
            row["target_s"] = target
            row["meets_target"] = row["run_s"] <= target and row["max_rss_mib"] < MEMORY_TARGET_MIB
        rows.append(row)
        summary = (
            row["error"]
            if "error" in row
            else f"{row['run_s']:.1f} s (target {target:g} s), peak RSS {row['max_rss_mib']:.0f} "
            f"MiB, {row['workloads']:,} workloads, {row['events']:,} events"
        )
        print(f"{name} [{variant}]: {summary}", file=sys.stderr)
        if "kueue" in row:
            k = row["kueue"]
            waits = ", ".join(f"{c} {v:g} s" for c, v in k["mean_time_to_admission_s"].items())
            print(
                f"  average usage {k['average_usage_percent']:.1f}%, mean time to admission: "
                f"{waits}",
                file=sys.stderr,
            )
    report = {
        "benchmark": "simulate_speed",
        "machine": {**machine(), "load_average_before": load_before},
        "memory_target_mib": MEMORY_TARGET_MIB,
        "results": rows,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
