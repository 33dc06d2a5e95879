"""SLA metrics of a service in a run, from its traffic and when its replicas served (pure).

Definitions (each over the measured window ``[start, end)``):

* **serving(t)**: replicas serving at ``t`` (placed, image pulled, model loaded, not yet
  deleted or evicted); **capacity(t)** = serving(t) x the service's ``capacity_rps``.
* **Capacity-short minutes**: the time during which the request rate is above capacity(t)
  (a capacity measure, not a latency SLO: the request-level SLO is ``request_slo``).
* **Requests in capacity short**: the requests that arrived during those minutes (all of
  them: each met an overloaded service). **Requests over capacity**: the integral of
  ``rate - capacity`` where positive (the requests beyond what the replicas could serve).
* **needed(t)** = ``ceil(rate(t) / capacity_rps)`` (at most ``max_replicas``): the
  perfect-foresight capacity curve, replicas serving exactly when needed.
* **Demand steps**: each time needed(t) rises to a level ``k`` from below (one step per
  level crossed) while fewer than ``k`` replicas serve; a rise already covered by serving
  replicas is counted apart (``steps_met``). **Time to capacity**: per demand step, the time
  until serving(t) >= k; a step still unmet at ``end`` counts with ``end - t`` (censored).
  p50/p99 are nearest-rank.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetshare.inference.service import Service
from fleetshare.inference.serving import serve, slo_report
from fleetshare.inference.traffic import Traffic
from fleetshare.simulate.metrics import percentiles


@dataclass(frozen=True)
class Steps:
    """A step function: ``values[i]`` from ``times[i]`` to the next time (0 before)."""

    times: tuple[float, ...]
    values: tuple[int, ...]

    def at(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        return self.values[i] if i >= 0 else 0


def serving_steps(intervals: Sequence[tuple[float, float]]) -> Steps:
    """How many ``[start, stop)`` intervals hold at each time."""
    changes: dict[float, int] = {}
    for start, stop in intervals:
        if stop <= start:
            continue
        changes[start] = changes.get(start, 0) + 1
        changes[stop] = changes.get(stop, 0) - 1
    times, values, count = [], [], 0
    for t in sorted(changes):
        count += changes[t]
        times.append(t)
        values.append(count)
    return Steps(tuple(times), tuple(values))


@dataclass(frozen=True)
class Sla:
    """The SLA metrics of one service in one run (see the module docstring)."""

    capacity_short_minutes: float
    requests: float
    requests_in_capacity_short: float
    requests_over_capacity: float
    steps: int
    steps_met: int
    time_to_capacity: dict[str, float | None]
    needed_replica_hours: float


def _segments(
    traffic: Traffic, serving: Steps, start: float, end: float
) -> list[tuple[float, float, float, int]]:
    """``(a, b, rate, serving)`` over ``[start, end)``, constant on each piece."""
    cuts = {start, end}
    cuts.update(t for t in traffic.times if start < t < end)
    cuts.update(t for t in serving.times if start < t < end)
    points = sorted(cuts)
    return [(a, b, traffic.at(a), serving.at(a)) for a, b in itertools.pairwise(points)]


def measure(
    traffic: Traffic,
    serving: Steps,
    capacity_rps: float,
    needed: Callable[[float], int],
    start: float,
    end: float,
) -> Sla:
    """The SLA metrics over ``[start, end)``; ``needed`` maps a rate to replicas."""
    short = requests = in_short = over = needed_hours = 0.0
    for a, b, rate, count in _segments(traffic, serving, start, end):
        span = b - a
        capacity = count * capacity_rps
        requests += rate * span
        needed_hours += needed(rate) * span / 3600
        if rate > capacity:
            short += span
            in_short += rate * span
            over += (rate - capacity) * span
    waits, met = time_to_capacity(traffic, serving, needed, start, end)
    return Sla(
        capacity_short_minutes=short / 60,
        requests=requests,
        requests_in_capacity_short=in_short,
        requests_over_capacity=over,
        steps=len(waits),
        steps_met=met,
        time_to_capacity=percentiles(np.array(waits, dtype=np.float64)),
        needed_replica_hours=needed_hours,
    )


def time_to_capacity(
    traffic: Traffic, serving: Steps, needed: Callable[[float], int], start: float, end: float
) -> tuple[list[float], int]:
    """Per demand step in ``[start, end)``, seconds until serving reached its level; and how
    many rises serving replicas already covered."""
    waits: list[float] = []
    met = 0
    level = 0
    for t, rate in zip(traffic.times, traffic.rates, strict=True):
        if t >= end:
            break
        now_needed = needed(rate)
        if t >= start:
            serving_now = serving.at(t)
            for k in range(level + 1, now_needed + 1):
                if serving_now >= k:
                    met += 1
                else:
                    waits.append(_reached(serving, k, t, end) - t)
        level = now_needed
    return waits, met


def _reached(serving: Steps, k: int, t: float, end: float) -> float:
    """The first time at or after ``t`` when serving is at least ``k`` (``end`` if never)."""
    i = bisect.bisect_right(serving.times, t)
    while i < len(serving.times) and serving.times[i] < end:
        if serving.values[i] >= k:
            return serving.times[i]
        i += 1
    return end


def gpu_hours(intervals: Sequence[tuple[float, float, float]], start: float, end: float) -> float:
    """GPU-hours of ``(from, to, gpus)`` intervals within ``[start, end)``."""
    return sum(g * max(0.0, min(b, end) - max(a, start)) for a, b, g in intervals) / 3600


def above_max_replicas_minutes(
    traffic: Traffic, capacity_rps: float, max_replicas: int, start: float, end: float
) -> float:
    """Minutes of ``[start, end)`` when the rate needs more than ``max_replicas`` replicas
    (``ceil(rate / capacity_rps) > max_replicas``): capacity the scaler may never add."""
    short = 0.0
    for a, b, rate in traffic.steps():
        lo, hi = max(a, start), min(b, end)
        if hi > lo and math.ceil(rate / capacity_rps - 1e-9) > max_replicas:
            short += hi - lo
    return short / 60


def request_slo(
    service: Service,
    intervals: Sequence[tuple[float, float]],
    serving: Steps,
    start: float,
    end: float,
) -> dict[str, Any] | None:
    """The request-level SLO figures of a service with a serving model (None without one):
    its requests served on the replicas' serving ``intervals`` up to ``end``
    (:func:`fleetshare.inference.serving.serve`), reported over ``[start, end)``
    (:func:`fleetshare.inference.serving.slo_report`)."""
    if service.serving is None or service.slo is None or service.requests is None:
        return None
    requests = service.requests
    served = serve(requests, intervals, service.serving, end)
    index = np.searchsorted(np.array(serving.times), requests.arrival, side="right") - 1
    values = np.array((0, *serving.values), dtype=np.int64)
    at_arrival = values[index + 1]
    report = slo_report(served, service.slo, at_arrival, start, end)
    return {
        "slo_violation_minutes": round(report.violation_minutes, 2),
        "requests": report.requests,
        "requests_missed_slo": report.missed,
        "requests_missed_slo_share": None
        if report.missed_share is None
        else round(report.missed_share, 5),
        "requests_unserved": report.unserved,
        "ttft_seconds": _round3(report.ttft),
        "tpot_seconds": _round3(report.tpot),
        "e2e_seconds": _round3(report.e2e),
        "cold_start_requests": report.cold_start_requests,
        "cold_start_wait_seconds": _round3(report.cold_start_wait),
        "waiting_at_window_start": report.waiting_at_start,
        "oldest_wait_at_window_start_seconds": round(report.oldest_wait_at_start, 3),
    }


def _round3(values: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (None if v is None else round(v, 3)) for k, v in values.items()}


@dataclass(frozen=True)
class Training:
    """What training holding a service's headroom did in a window (see
    :func:`training_in_headroom`), in GPU-hours."""

    ran: float
    lost: float
    delayed: float
    lost_independent: float
    """``lost`` with each job's checkpoints in a phase of its own (see
    :func:`training_in_headroom`)."""


def training_in_headroom(
    pods: Sequence[tuple[Sequence[tuple[float, float]], float | None]],
    gpus: float,
    checkpoint: float,
    start: float,
    end: float,
    saved: bool = False,
) -> Training:
    """Training pods holding the headroom (``pods``: each one's placed intervals, oldest
    first, and when it was deleted, if it was), over ``[start, end)``:

    * **ran**: GPU-hours placed (training running);
    * **lost**: at each interval that ended before ``end`` (a replica preempted it, or the
      headroom shrank), the work since its last checkpoint: ``(stop - placed) mod
      checkpoint`` (checkpoints every ``checkpoint`` seconds from each placement);
    * **delayed**: GPU-hours the pods waited to run again after such an end, until placed
      again (or deleted, or ``end``);
    * **lost_independent**: ``lost`` for jobs whose checkpoints keep phases of their own:
      a job first placed with work since its last checkpoint uniform in ``[0, checkpoint)``
      (it came from a queue whose jobs started at any time) loses ``checkpoint / 2`` at its
      first end, expected; after a restart from its checkpoint, as ``lost``. (``lost``
      checkpoints every job from its first placement: jobs placed together checkpoint
      together.)

    ``saved``: every job saves its state when it is stopped (checkpoint on preemption,
    within its termination grace period): nothing is lost, either way.

    Each counts where it falls in the window (a loss at its stop; a wait as its overlap)."""
    ran = lost = delayed = independent = 0.0
    for intervals, deleted in pods:
        for i, (a, b) in enumerate(intervals):
            ran += max(0.0, min(b, end) - max(a, start))
            if b >= end:
                continue
            if start <= b and not saved:
                lost += (b - a) % checkpoint
                independent += checkpoint / 2 if i == 0 else (b - a) % checkpoint
            resumed = intervals[i + 1][0] if i + 1 < len(intervals) else None
            until = min(x for x in (resumed, deleted, end) if x is not None)
            delayed += max(0.0, min(until, end) - max(b, start))
    hours = gpus / 3600
    return Training(ran * hours, lost * hours, delayed * hours, independent * hours)
