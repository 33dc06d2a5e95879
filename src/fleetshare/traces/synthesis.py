"""Jobs from per-minute counts of running and pending work: a queue, not a demand curve.

A cluster that samples, every minute, how many GPUs (and jobs) of one size class are
*running* and how many are *pending* tells when work waited and when it ran, but not which job
was which. :func:`queue_jobs` builds jobs that reproduce both counts, each with a submission
time (when it started waiting, or started running if it never waited), a start and a stop:

- **Pending falls** by ``f`` units: pending jobs start, oldest first, as many as fit in ``f``
  (first fit in queue order). A job waits once: its run is what ran, its wait what was pending.
- **Running differs** from the data after those starts: the difference ``d`` is made up by
  *ending* running jobs (``d < 0``; the most recently started first, or random ones with
  ``end_order="random"``; never one started that same minute) or by *fresh* jobs that start
  at once without having waited (``d > 0``).
- **Pending rises** after the starts: new jobs join the queue. Should it still stand above the
  data (sizes that did not fit), the newest pending jobs that fit are withdrawn: they never ran
  and are not returned (``QueueStats.withdrawn_unit_seconds`` says how much waiting they held).

Where jobs start or join the queue, their sizes come from :func:`split`: the number of new jobs
is what the job counts of the data say (running or pending jobs now, minus those the synthesis
already has), and the sizes are the most probable split of the new units into that many jobs
under a prior over sizes; when the counts say nothing usable (no count, or one the units cannot
be split into), the number of jobs is the units divided by the class's mean size (from the
data), rounded. Sizes are whole *units* (a GPU, or an 8-GPU pod for multi-node jobs; the loader
decides). Where a size mismatch leaves the synthetic count off the data (a fall of 2 units with
only 4-unit jobs running), the next minute's comparison makes it up; :class:`QueueStats`
measures how far the synthesis strayed (``running_error_unit_seconds``).

Every rule is deterministic; ``seed`` matters only with ``end_order="random"``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from fleetshare.traces.common import EndOrder, FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class SynthJob:
    """One synthesised job: ``size`` units, waiting from ``submit`` to ``start`` and running
    from ``start`` to ``stop``. ``start`` is None for a job still waiting at the end (its
    ``stop`` is then the end)."""

    size: int
    submit: float
    start: float | None
    stop: float

    @property
    def wait(self) -> float:
        """Seconds pending (until the end when it never started)."""
        return (self.start if self.start is not None else self.stop) - self.submit

    @property
    def run(self) -> float:
        """Seconds running (0 when it never started)."""
        return 0.0 if self.start is None else self.stop - self.start


@dataclass
class QueueStats:
    """How the synthesis went: counts, and how far the synthetic counts strayed from the data."""

    jobs: int = 0
    never_started: int = 0
    withdrawn: int = 0
    withdrawn_unit_seconds: float = 0.0
    running_error_unit_seconds: float = 0.0
    """Σ |synthetic running units - data running units| x seconds (0: reproduced exactly)."""
    pending_error_unit_seconds: float = 0.0
    sizes: dict[int, int] = field(default_factory=dict)


def _log_weights(prior: Mapping[int, float]) -> tuple[tuple[int, float], ...]:
    total = sum(prior.values())
    if not prior or total <= 0 or any(s < 1 or w <= 0 for s, w in prior.items()):
        raise ValueError(f"a size prior needs positive sizes and weights, got {dict(prior)}")
    return tuple(sorted((s, math.log(w / total)) for s, w in prior.items()))


@lru_cache(maxsize=65536)
def _best_split(
    total: int, count: int, weights: tuple[tuple[int, float], ...]
) -> tuple[int, ...] | None:
    """The most probable multiset of ``count`` sizes summing to ``total`` (None: impossible)."""
    if count < 1 or total < count * weights[0][0] or total > count * weights[-1][0]:
        return None
    neg = -math.inf
    # best[n][u]: best log-probability of n jobs totalling u, with sizes non-decreasing
    # (each size used in order), and the choice that reached it
    best = np.full((count + 1, total + 1), neg)
    best[0][0] = 0.0
    for size, logp in weights:
        if size > total:
            break
        for n in range(1, count + 1):
            prev = best[n - 1, : total + 1 - size] + logp
            cur = best[n, size:]
            np.maximum(cur, prev, out=cur)
    if best[count][total] == neg:
        return None
    # walk back: at each step take the largest size whose predecessor reaches the optimum
    out: list[int] = []
    n, u = count, total
    while n:
        for size, logp in reversed(weights):
            reaches = size <= u and best[n - 1][u - size] != neg
            if reaches and math.isclose(best[n - 1][u - size] + logp, best[n][u], abs_tol=1e-9):
                out.append(size)
                n, u = n - 1, u - size
                break
        else:  # pragma: no cover - the table says a split exists
            return None
    return tuple(sorted(out, reverse=True))


def split(total: int, count: int | None, prior: Mapping[int, float], mean: float) -> list[int]:
    """Sizes of the jobs ``total`` units become: ``count`` jobs when that is possible (the most
    probable split under ``prior``, larger sizes first), else ``round(total / mean)`` jobs
    (kept within what the prior's sizes allow), else units of the smallest size."""
    if total <= 0:
        return []
    weights = _log_weights(prior)
    if count is not None and count >= 1:
        found = _best_split(total, count, weights)
        if found is not None:
            return list(found)
    smallest, largest = weights[0][0], weights[-1][0]
    guess = max(1, round(total / mean)) if mean > 0 else total
    guess = min(max(guess, -(-total // largest)), max(1, total // smallest))
    for n in sorted(range(1, total + 1), key=lambda n: (abs(n - guess), n)):
        found = _best_split(total, n, weights)
        if found is not None:
            return list(found)
        if abs(n - guess) > 64:
            break
    return [1] * total  # sizes the prior cannot reach: single units


def _take(jobs: list[int], sizes: Sequence[int], units: int, count: int | None = None) -> list[int]:
    """Positions in ``jobs`` (tried in that order) whose sizes add up to at most ``units``:
    first fit, and when ``count`` is given, leaving room for that many jobs in all."""
    chosen: list[int] = []
    left = units
    if count is not None and count >= 1:
        need = count
        for pos in jobs:
            size = sizes[pos]
            if need <= 0 or left <= 0:
                break
            fits = size == left if need == 1 else size <= left - (need - 1)
            if fits:
                chosen.append(pos)
                left -= size
                need -= 1
    taken = set(chosen)
    for pos in jobs:
        if left <= 0:
            break
        if pos not in taken and sizes[pos] <= left:
            chosen.append(pos)
            taken.add(pos)
            left -= sizes[pos]
    return chosen


def queue_jobs(
    times: Sequence[float] | FloatArray,
    running: Sequence[int] | IntArray,
    pending: Sequence[int] | IntArray,
    end: float,
    prior: Mapping[int, float],
    *,
    running_jobs: Sequence[int] | IntArray | None = None,
    pending_jobs: Sequence[int] | IntArray | None = None,
    mean_size: float | None = None,
    end_order: EndOrder = "lifo",
    seed: int = 0,
) -> tuple[list[SynthJob], QueueStats]:
    """Jobs whose running and pending units follow ``running`` and ``pending`` (held between
    ``times``, in units); see the module docstring. Jobs are returned in submission order."""
    t = np.asarray(times, dtype=np.float64)
    run_u = np.asarray(running, dtype=np.int64)
    pend_u = np.asarray(pending, dtype=np.int64)
    if t.shape != run_u.shape or t.shape != pend_u.shape or t.ndim != 1:
        raise ValueError("times, running and pending must be 1-D and of the same length")
    if (run_u < 0).any() or (pend_u < 0).any():
        raise ValueError("counts must not be negative")
    if t.size and (np.diff(t) <= 0).any():
        raise ValueError("times must increase")
    if t.size and t[-1] >= end:
        raise ValueError(f"end {end} must come after the last sample {t[-1]}")
    if end_order not in ("lifo", "random"):
        raise ValueError(f"end_order must be 'lifo' or 'random', got {end_order!r}")
    run_j = None if running_jobs is None else np.asarray(running_jobs, dtype=np.int64)
    pend_j = None if pending_jobs is None else np.asarray(pending_jobs, dtype=np.int64)
    for name, arr in (("running_jobs", run_j), ("pending_jobs", pend_j)):
        if arr is not None and arr.shape != t.shape:
            raise ValueError(f"{name} must have one value per sample")
    if mean_size is None:
        weights = _log_weights(prior)
        mean_size = sum(s * math.exp(lp) for s, lp in weights)
    rng = random.Random(seed)
    stats = QueueStats()

    sizes: list[int] = []
    submits: list[float] = []
    starts: list[float | None] = []
    stops: list[float] = []
    queue: list[int] = []  # waiting jobs, oldest first
    active: list[int] = []  # running jobs, in start order
    run_now = 0
    pend_now = 0

    def new(size: int, at: float, started: bool) -> int:
        sizes.append(size)
        submits.append(at)
        starts.append(at if started else None)
        stops.append(end)
        return len(sizes) - 1

    if t.size:
        changes = np.concatenate(([0], np.flatnonzero(np.diff(run_u) | np.diff(pend_u)) + 1))
        if run_j is not None:
            changes = np.union1d(changes, np.flatnonzero(np.diff(run_j)) + 1)
        if pend_j is not None:
            changes = np.union1d(changes, np.flatnonzero(np.diff(pend_j)) + 1)
    else:
        changes = np.zeros(0, dtype=np.int64)
    edges = np.append(t, end)
    last_i = 0
    for i in changes.tolist():
        now = float(t[i])
        # how far the synthesis stood from the data since the previous change
        if i:
            span = float(edges[i] - edges[last_i])
            stats.running_error_unit_seconds += abs(run_now - int(run_u[last_i])) * span
            stats.pending_error_unit_seconds += abs(pend_now - int(pend_u[last_i])) * span
        last_i = i
        want_run, want_pend = int(run_u[i]), int(pend_u[i])
        # 1. pending falls: the oldest waiting jobs that fit start
        started_now: set[int] = set()
        if pend_now > want_pend:
            for job in _take(queue, sizes, pend_now - want_pend):
                starts[job] = now
                started_now.add(job)
                pend_now -= sizes[job]
                run_now += sizes[job]
            queue = [j for j in queue if j not in started_now]
            active.extend(sorted(started_now))
        # 2. running: end jobs, or start fresh ones
        if run_now > want_run:
            order = [j for j in reversed(active) if j not in started_now]
            if end_order == "random":
                rng.shuffle(order)
            ending_jobs = None
            if run_j is not None:
                ending_jobs = len(active) - int(run_j[i])
            done = _take(order, sizes, run_now - want_run, ending_jobs)
            left = run_now - want_run - sum(sizes[j] for j in done)
            if left > 0:  # no exact fit: end the smallest larger job, start the rest afresh
                chosen = set(done)
                bigger = [j for j in order if j not in chosen and sizes[j] > left]
                if bigger:
                    done.append(min(bigger, key=lambda j: sizes[j]))
            for job in done:
                stops[job] = now
                run_now -= sizes[job]
            gone = set(done)
            active = [j for j in active if j not in gone]
            # still above: only jobs that just left the queue could end, so they did not start
            for job in sorted(started_now, reverse=True):
                if run_now <= want_run:
                    break
                starts[job] = None
                started_now.discard(job)
                active.remove(job)
                queue.insert(0, job)
                run_now -= sizes[job]
                pend_now += sizes[job]
        if run_now < want_run:
            count = None if run_j is None else int(run_j[i]) - len(active)
            for size in split(want_run - run_now, count, prior, mean_size):
                active.append(new(size, now, True))
                run_now += size
        # 3. pending: new jobs join the queue, or the newest that fit are withdrawn
        if pend_now < want_pend:
            count = None if pend_j is None else int(pend_j[i]) - len(queue)
            for size in split(want_pend - pend_now, count, prior, mean_size):
                queue.append(new(size, now, False))
                pend_now += size
        elif pend_now > want_pend:
            newest = list(reversed(queue))
            out = _take(newest, sizes, pend_now - want_pend)
            left = pend_now - want_pend - sum(sizes[j] for j in out)
            if left > 0:  # no exact fit: withdraw the smallest larger job, the rest rejoins
                chosen = set(out)
                bigger = [j for j in newest if j not in chosen and sizes[j] > left]
                if bigger:
                    out.append(min(bigger, key=lambda j: sizes[j]))
            for job in out:
                pend_now -= sizes[job]
                stats.withdrawn += 1
                stats.withdrawn_unit_seconds += sizes[job] * (now - submits[job])
                sizes[job] = 0  # dropped below
            gone = set(out)
            queue = [j for j in queue if j not in gone]
            if pend_now < want_pend:
                for size in split(want_pend - pend_now, None, prior, mean_size):
                    queue.append(new(size, now, False))
                    pend_now += size
    if t.size:
        span = float(end - edges[last_i])
        stats.running_error_unit_seconds += abs(run_now - int(run_u[last_i])) * span
        stats.pending_error_unit_seconds += abs(pend_now - int(pend_u[last_i])) * span

    jobs: list[SynthJob] = []
    for k, size in enumerate(sizes):
        start = starts[k]
        if size == 0 or (start is not None and stops[k] <= start):
            continue
        jobs.append(SynthJob(size, submits[k], start, stops[k]))
        stats.sizes[size] = stats.sizes.get(size, 0) + 1
        if start is None:
            stats.never_started += 1
    stats.jobs = len(jobs)
    jobs.sort(key=lambda j: (j.submit, j.start if j.start is not None else end))
    return jobs, stats
