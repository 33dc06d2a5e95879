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


def _check_series(
    t: FloatArray,
    run_u: IntArray,
    pend_u: IntArray,
    end: float,
    end_order: str,
    job_counts: Mapping[str, IntArray | None],
) -> None:
    """Refuse series that are not one value per increasing sample time before ``end``."""
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
    for name, arr in job_counts.items():
        if arr is not None and arr.shape != t.shape:
            raise ValueError(f"{name} must have one value per sample")


def _change_points(
    t: FloatArray, series: Sequence[IntArray], job_counts: Sequence[IntArray | None]
) -> IntArray:
    """The samples at which a unit count or a given job count changes (the first always)."""
    if not t.size:
        return np.zeros(0, dtype=np.int64)
    changes = np.concatenate(([0], np.flatnonzero(np.diff(series[0]) | np.diff(series[1])) + 1))
    for arr in job_counts:
        if arr is not None:
            changes = np.union1d(changes, np.flatnonzero(np.diff(arr)) + 1)
    return changes


def _take_covering(
    jobs: list[int], sizes: Sequence[int], units: int, count: int | None = None
) -> list[int]:
    """:func:`_take`, and when that leaves units over, the smallest larger job as well."""
    chosen = _take(jobs, sizes, units, count)
    left = units - sum(sizes[j] for j in chosen)
    if left > 0:
        taken = set(chosen)
        bigger = [j for j in jobs if j not in taken and sizes[j] > left]
        if bigger:
            chosen.append(min(bigger, key=lambda j: sizes[j]))
    return chosen


@dataclass
class _Synthesis:
    """The jobs made so far (by index) and which of them run and wait now."""

    end: float
    prior: Mapping[int, float]
    mean_size: float
    rng: random.Random | None
    """Shuffles the jobs that may end (``end_order="random"``); None: the newest end first."""
    stats: QueueStats = field(default_factory=QueueStats)
    sizes: list[int] = field(default_factory=list)
    submits: list[float] = field(default_factory=list)
    starts: list[float | None] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)
    """Waiting jobs, oldest first."""
    active: list[int] = field(default_factory=list)
    """Running jobs, in start order."""
    run_now: int = 0
    pend_now: int = 0

    def step(
        self, now: float, want_run: int, want_pend: int, run_jobs: int | None, pend_jobs: int | None
    ) -> None:
        """Follow the data at ``now``: the three rules of the module docstring in turn."""
        started_now = self._start_waiting(now, want_pend)
        if self.run_now > want_run:
            ending = None if run_jobs is None else len(self.active) - run_jobs
            self._end_running(now, want_run, ending, started_now)
            self._unstart(want_run, started_now)
        if self.run_now < want_run:
            count = None if run_jobs is None else run_jobs - len(self.active)
            self._add(now, want_run - self.run_now, count, started=True)
        if self.pend_now < want_pend:
            count = None if pend_jobs is None else pend_jobs - len(self.queue)
            self._add(now, want_pend - self.pend_now, count, started=False)
        elif self.pend_now > want_pend:
            self._withdraw(now, want_pend)
            if self.pend_now < want_pend:
                self._add(now, want_pend - self.pend_now, None, started=False)

    def _new(self, size: int, at: float, started: bool) -> int:
        self.sizes.append(size)
        self.submits.append(at)
        self.starts.append(at if started else None)
        self.stops.append(self.end)
        return len(self.sizes) - 1

    def _add(self, now: float, units: int, count: int | None, *, started: bool) -> None:
        """New jobs of ``units`` in all: running at once, or joining the queue."""
        for size in split(units, count, self.prior, self.mean_size):
            job = self._new(size, now, started)
            if started:
                self.active.append(job)
                self.run_now += size
            else:
                self.queue.append(job)
                self.pend_now += size

    def _start_waiting(self, now: float, want_pend: int) -> set[int]:
        """Pending falls: the oldest waiting jobs that fit start; returns them."""
        started_now: set[int] = set()
        if self.pend_now <= want_pend:
            return started_now
        for job in _take(self.queue, self.sizes, self.pend_now - want_pend):
            self.starts[job] = now
            started_now.add(job)
            self.pend_now -= self.sizes[job]
            self.run_now += self.sizes[job]
        self.queue = [j for j in self.queue if j not in started_now]
        self.active.extend(sorted(started_now))
        return started_now

    def _end_running(
        self, now: float, want_run: int, ending: int | None, started_now: set[int]
    ) -> None:
        """Running above the data: end jobs (never one that started now)."""
        order = [j for j in reversed(self.active) if j not in started_now]
        if self.rng is not None:
            self.rng.shuffle(order)
        done = _take_covering(order, self.sizes, self.run_now - want_run, ending)
        for job in done:
            self.stops[job] = now
            self.run_now -= self.sizes[job]
        gone = set(done)
        self.active = [j for j in self.active if j not in gone]

    def _unstart(self, want_run: int, started_now: set[int]) -> None:
        """Still above: only jobs that just left the queue could end, so they did not start."""
        for job in sorted(started_now, reverse=True):
            if self.run_now <= want_run:
                break
            self.starts[job] = None
            started_now.discard(job)
            self.active.remove(job)
            self.queue.insert(0, job)
            self.run_now -= self.sizes[job]
            self.pend_now += self.sizes[job]

    def _withdraw(self, now: float, want_pend: int) -> None:
        """Pending above the data: the newest waiting jobs that fit never run."""
        out = _take_covering(list(reversed(self.queue)), self.sizes, self.pend_now - want_pend)
        for job in out:
            self.pend_now -= self.sizes[job]
            self.stats.withdrawn += 1
            self.stats.withdrawn_unit_seconds += self.sizes[job] * (now - self.submits[job])
            self.sizes[job] = 0  # dropped by jobs()
        gone = set(out)
        self.queue = [j for j in self.queue if j not in gone]

    def stray(self, span: float, data_run: int, data_pend: int) -> None:
        """Count how far the synthesis stood from the data for ``span`` seconds."""
        self.stats.running_error_unit_seconds += abs(self.run_now - data_run) * span
        self.stats.pending_error_unit_seconds += abs(self.pend_now - data_pend) * span

    def jobs(self) -> list[SynthJob]:
        """The jobs that waited or ran, in submission order, counted in ``stats``."""
        jobs: list[SynthJob] = []
        for k, size in enumerate(self.sizes):
            start = self.starts[k]
            if size == 0 or (start is not None and self.stops[k] <= start):
                continue
            jobs.append(SynthJob(size, self.submits[k], start, self.stops[k]))
            self.stats.sizes[size] = self.stats.sizes.get(size, 0) + 1
            if start is None:
                self.stats.never_started += 1
        self.stats.jobs = len(jobs)
        end = self.end
        jobs.sort(key=lambda j: (j.submit, j.start if j.start is not None else end))
        return jobs


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
    run_j = None if running_jobs is None else np.asarray(running_jobs, dtype=np.int64)
    pend_j = None if pending_jobs is None else np.asarray(pending_jobs, dtype=np.int64)
    _check_series(t, run_u, pend_u, end, end_order, {"running_jobs": run_j, "pending_jobs": pend_j})
    if mean_size is None:
        mean_size = sum(s * math.exp(lp) for s, lp in _log_weights(prior))
    rng = random.Random(seed) if end_order == "random" else None
    synth = _Synthesis(end, prior, mean_size, rng)
    edges = np.append(t, end)
    last_i = 0
    for i in _change_points(t, (run_u, pend_u), (run_j, pend_j)).tolist():
        if i:  # how far the synthesis stood from the data since the previous change
            synth.stray(float(edges[i] - edges[last_i]), int(run_u[last_i]), int(pend_u[last_i]))
        last_i = i
        synth.step(
            float(t[i]),
            int(run_u[i]),
            int(pend_u[i]),
            None if run_j is None else int(run_j[i]),
            None if pend_j is None else int(pend_j[i]),
        )
    if t.size:
        synth.stray(float(end - edges[last_i]), int(run_u[last_i]), int(pend_u[last_i]))
    return synth.jobs(), synth.stats
