"""The numbers Kueue's scheduler benchmark reports, with the definitions of Kueue's recorder
(``test/performance/scheduler/runner/recorder/recorder.go``), from one record per workload:
shared by the simulator's benchmark (``simulate_speed.py``) and the one through the API
server (``kueue_perf_api.py``).

- **time to admission** of a workload: from its creation to its *last* admission (Kueue's
  recorder overwrites ``TimeToAdmitMs`` each time Admitted turns true, so a re-admission
  after a preemption counts); averaged per class. ``mean_first_admission_s`` keeps the first
  admission beside it.
- **average usage**: Σ over workloads of CPU x time admitted (from each admission to its
  release: finish or preemption; Kueue: the ClusterQueues' ``status.flavorsUsage``), divided
  by the window and the total nominal quota, in percent. The window runs from the first
  creation to the last release.
- **useful usage**: the same with each workload's running time instead of its admitted time
  (Σ CPU x running time / window / nominal quota): the part of the admitted time that ran.
- **mean time admitted** per class: the mean length of an admission (admitted to released;
  those still admitted at the end left out): its running time plus whatever keeps the quota
  held around it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Observed:
    """One workload as the benchmark saw it (times in seconds on one clock)."""

    cls: str
    """Kueue's workload class (small, medium, large)."""
    cpu: float
    created: float
    admissions: Sequence[tuple[float, float | None]]
    """(admitted at, released at) in order; released None: still admitted at the end."""
    runtime: float = 0.0
    """How long it runs once admitted (its share of the work)."""


def kueue_measures(observed: Sequence[Observed], nominal_cpu: float) -> dict[str, Any]:
    """Average usage and mean time to admission per class (see the module docstring)."""
    if nominal_cpu <= 0:
        raise ValueError(f"nominal_cpu must be positive; got {nominal_cpu}")
    deltas: list[tuple[float, float]] = []
    for w in observed:
        for admitted, released in w.admissions:
            deltas.append((admitted, w.cpu))
            if released is not None:
                deltas.append((released, -w.cpu))
    deltas.sort()
    start = min((w.created for w in observed), default=0.0)
    end = max((t for t, _ in deltas), default=start)
    area, level, last = 0.0, 0.0, start
    for t, d in deltas:
        area += level * (t - last)
        level += d
        last = t
    usage = 100 * area / ((end - start) * nominal_cpu) if end > start else 0.0
    waits: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}
    held: dict[str, list[float]] = {}
    for w in observed:
        for admitted, released in w.admissions:
            if released is not None:
                held.setdefault(w.cls, []).append(released - admitted)
        if w.admissions:
            waits.setdefault(w.cls, []).append(w.admissions[-1][0] - w.created)
            firsts.setdefault(w.cls, []).append(w.admissions[0][0] - w.created)
    work = sum(w.cpu * w.runtime for w in observed)
    return {
        "average_usage_percent": round(usage, 2),
        "useful_usage_percent": round(100 * work / ((end - start) * nominal_cpu), 2)
        if end > start
        else 0.0,
        "admitted_cpu_seconds": round(area, 1),
        "work_cpu_seconds": round(work, 1),
        "window_s": [start, end],
        "mean_time_to_admission_s": {
            cls: round(sum(v) / len(v), 2) for cls, v in sorted(waits.items())
        },
        "mean_first_admission_s": {
            cls: round(sum(v) / len(v), 2) for cls, v in sorted(firsts.items())
        },
        "mean_time_admitted_s": {cls: round(sum(v) / len(v), 2) for cls, v in sorted(held.items())},
        "admitted_per_class": {cls: len(v) for cls, v in sorted(waits.items())},
    }


def usage_timeline(
    observed: Sequence[Observed], nominal_cpu: float, step: float = 10.0
) -> list[dict[str, float]]:
    """Where the average usage comes from: per ``step`` seconds of the window (from the first
    creation), the usage over that interval (Σ CPU x time admitted in it / step / nominal
    quota, percent), the admissions per second that began in it, and the workloads created
    and not yet admitted at its end (the backlog). A workload still admitted at the end
    counts until the last event."""
    if nominal_cpu <= 0 or step <= 0:
        raise ValueError(f"nominal_cpu and step must be positive; got {nominal_cpu}, {step}")
    start = min((w.created for w in observed), default=0.0)
    ends = [r for w in observed for _, r in w.admissions if r is not None]
    end = max([*ends, *(a for w in observed for a, _ in w.admissions)], default=start)
    n = max(1, math.ceil((end - start) / step))
    area = [0.0] * n
    began = [0] * n
    backlog = [0] * n
    for w in observed:
        for admitted, released in w.admissions:
            released = end if released is None else released
            began[min(n - 1, int((admitted - start) // step))] += 1
            first, last = int((admitted - start) // step), int((released - start) // step)
            for b in range(first, min(last, n - 1) + 1):
                lo, hi = start + b * step, start + (b + 1) * step
                area[b] += w.cpu * max(0.0, min(hi, released) - max(lo, admitted))
        first_admitted = w.admissions[0][0] if w.admissions else float("inf")
        for b in range(n):
            if w.created <= start + (b + 1) * step < first_admitted:
                backlog[b] += 1
    return [
        {
            "t": round(b * step, 1),
            "usage_percent": round(100 * area[b] / (step * nominal_cpu), 1),
            "admissions_per_s": round(began[b] / step, 1),
            "backlog": backlog[b],
        }
        for b in range(n)
    ]


# -- the measures both tools get the same way, from the objects' timestamps ------------------


@dataclass(frozen=True, slots=True)
class Stamped:
    """One workload by the timestamps on its API object (epoch seconds): ``created`` is the
    API server's ``creationTimestamp``; ``admitted`` the last admission as its controller
    wrote it on the object (Kueue: the Workload's Admitted condition's
    ``lastTransitionTime``; fleetshare: the Job's admission annotation's ``at``), floored to
    whole seconds as ``metav1.Time`` is; ``finished`` when it was marked done (Kueue: the
    Finished condition, written by Kueue's runner; fleetshare: the Job's ``completionTime``,
    written by the Job controller). None: not (yet) so."""

    cls: str
    cpu: float
    runtime: float
    created: float
    admitted: float | None
    finished: float | None


def server_measures(stamped: Sequence[Stamped], nominal_cpu: float) -> dict[str, Any]:
    """Mean time to admission per class (creation to last admission) and useful usage (Σ CPU
    x running time of the finished workloads / window / nominal quota, percent; the window
    from the first creation to the last finish), from :class:`Stamped` records."""
    if nominal_cpu <= 0:
        raise ValueError(f"nominal_cpu must be positive; got {nominal_cpu}")
    waits: dict[str, list[float]] = {}
    for w in stamped:
        if w.admitted is not None:
            waits.setdefault(w.cls, []).append(math.floor(w.admitted) - math.floor(w.created))
    done = [w for w in stamped if w.finished is not None]
    start = min((w.created for w in stamped), default=0.0)
    end = max((w.finished for w in done if w.finished is not None), default=start)
    window = end - start
    work = sum(w.cpu * w.runtime for w in done)
    return {
        "workloads": len(stamped),
        "finished": len(done),
        "window_s": round(window, 1),
        "work_cpu_seconds": round(work, 1),
        "useful_usage_percent": round(100 * work / (window * nominal_cpu), 2)
        if window > 0
        else None,
        "mean_time_to_admission_s": {
            cls: round(sum(v) / len(v), 2) for cls, v in sorted(waits.items())
        },
        "admitted_per_class": {cls: len(v) for cls, v in sorted(waits.items())},
    }


def epoch(stamp: str | None) -> float | None:
    """An API timestamp (RFC 3339, ``Z``) in epoch seconds; None for None or empty."""
    if not stamp:
        return None
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
