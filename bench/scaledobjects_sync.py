"""Benchmark: what the operator's ScaledObject hook adds to a reconcile.

Every reconcile calls ``ScaledObjects.sync`` over the watched ScaledObjects: it reads an
object once per generation (the importer, the scaler, its Prometheus sources) and starts the
polls that are due on the thread pool; the polls themselves (queries, scale writes) run off
the reconcile and are not measured here. Two costs per object count:

* **first sight**: the first reconcile after a start, every object read and its poll started;
* **steady**: a reconcile with nothing due (the common case: polls come every 30 s, a
  reconcile every few seconds or on every change).

The pool is replaced by one that only records the submission, so only the reconcile's own
work is timed. Run ``python bench/scaledobjects_sync.py [--sizes 100 1000 5000]``; the result
goes to ``bench/results/scaledobjects_sync.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from fleetshare.operator.scaledobjects import ScaledObjects
from run_info import machine

OUT = Path(__file__).resolve().parent / "results" / "scaledobjects_sync.json"


class _Recorded:
    """A pool that runs nothing: each submission is a finished future."""

    def submit(self, *args: Any) -> Future[None]:
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def shutdown(self, **kwargs: Any) -> None:
        pass


def scaled_object(i: int) -> dict[str, Any]:
    trigger = {
        "type": "prometheus",
        "metadata": {
            "serverAddress": "http://prometheus:9090",
            "query": f'sum(rate(http_requests_total{{app="svc-{i}"}}[1m]))',
            "threshold": "50",
        },
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": f"svc-{i}", "namespace": "serving", "uid": f"u{i}", "generation": 1},
        "spec": {"scaleTargetRef": {"name": f"svc-{i}"}, "maxReplicaCount": 20,
                 "triggers": [trigger]},
    }  # fmt: skip


def measure(n: int, repeat: int) -> dict[str, Any]:
    objects = [scaled_object(i) for i in range(n)]
    first, steady = [], []
    for _ in range(repeat):
        scalers = ScaledObjects(None, None)  # type: ignore[arg-type]  # nothing is sent
        scalers.pool.shutdown()
        scalers.pool = _Recorded()  # type: ignore[assignment]
        start = time.perf_counter()
        scalers.sync(objects, 1000.0)
        first.append(time.perf_counter() - start)
        start = time.perf_counter()
        scalers.sync(objects, 1001.0)  # nothing due for 30 s
        steady.append(time.perf_counter() - start)
    return {
        "scaled_objects": n,
        "first_sight_ms": round(statistics.median(first) * 1000, 2),
        "steady_ms": round(statistics.median(steady) * 1000, 3),
        "steady_us_per_object": round(statistics.median(steady) / n * 1e6, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(n, args.repeat) for n in args.sizes]
    for row in rows:
        print(json.dumps(row))
    OUT.write_text(json.dumps({"machine": machine(), "repeat": args.repeat, "rows": rows},
                              indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
