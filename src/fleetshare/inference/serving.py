"""The request-level serving model: when each request got its first and its last token, given
when replicas served (pure; times are the simulation's).

A replica (``ServingSpec``) serves a request in two phases, after the split of LLM serving
engines (vLLM, TGI, TensorRT-LLM; Splitwise, ISCA 2024, measures the two phases apart):

* **prefill**: the prompt's ``prompt`` tokens at ``prefill_tokens_per_second``, one prompt at
  a time per replica; the first output token comes at its end;
* **decode**: the other ``output - 1`` tokens, each taking ``decode_seconds_per_token +
  decode_seconds_per_sequence x (b - 1)``, where ``b`` is the number of requests holding the
  replica's slots when the request's decode starts, itself included (continuous batching:
  a bigger batch makes every step slower). The per-token time is fixed at that moment (a
  simplification: a real engine's step time follows the batch as it changes).
* at most ``max_sequences`` requests hold a replica's slots (prefill or decode) at once.

Requests wait in one queue per service, first come first served: each goes, in arrival
order, to the replica where it can start soonest (a slot free and the prefill engine idle;
among replicas idle at its arrival, the one idle longest). The queue carries over: nothing is
dropped. A replica serves only from when it is ready to when it stops (deleted, evicted, or
the run's end), but a request it started is finished (a graceful drain). A request no
replica starts before ``horizon`` is **unserved**: its time to first token counts as
``horizon - arrival`` (censored) and it has no per-token or end-to-end latency.

Per request: **TTFT** (time to first token) = first token - arrival (queueing included);
**TPOT** (time per output token) = (last token - first token) / (output - 1), for requests
of two or more output tokens; **E2E** = last token - arrival.

:class:`Server` runs the model as time goes (exactly: :func:`serve` is a ``Server`` told every
replica at once), so that a scaler can read the requests waiting and running during a run.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetshare.inference.request_trace import Requests
from fleetshare.inference.spec import ServingSpec, SloSpec
from fleetshare.model.stats import nearest_rank

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Served:
    """What happened to each request (arrays in the requests' order; NaN where it does not
    apply): ``start`` (its prefill began), ``first`` (first token), ``last`` (last token)."""

    requests: Requests
    start: FloatArray
    first: FloatArray
    last: FloatArray
    horizon: float

    @property
    def unserved(self) -> npt.NDArray[np.bool_]:
        return np.isnan(self.start)

    def ttft(self) -> FloatArray:
        """Time to first token; ``horizon - arrival`` for unserved requests (censored)."""
        arrival = self.requests.arrival
        return np.where(self.unserved, self.horizon - arrival, self.first - arrival)

    def tpot(self) -> FloatArray:
        """Time per output token after the first (NaN for one-token outputs and unserved)."""
        steps = (self.requests.output - 1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(steps > 0, (self.last - self.first) / steps, np.nan)

    def e2e(self) -> FloatArray:
        """End-to-end latency (NaN for unserved requests)."""
        return self.last - self.requests.arrival

    def wait(self) -> FloatArray:
        """Seconds in the queue before prefill (``horizon - arrival`` when unserved)."""
        arrival = self.requests.arrival
        return np.where(self.unserved, self.horizon - arrival, self.start - arrival)


class _Replica:
    """One serving interval of a replica: its slots' free times and its prefill engine."""

    __slots__ = ("prefill_free", "slots", "stop")

    def __init__(self, start: float, slots: int) -> None:
        self.stop = math.inf
        """When it stops (infinite while not yet known)."""
        self.prefill_free = start
        self.slots = [start] * slots
        """When each slot frees, sorted."""

    def ready(self) -> float:
        """The soonest a request can start here."""
        return max(self.prefill_free, self.slots[0])


class Server:
    """The serving model run as time goes (the incremental form of :func:`serve`, exact):
    told the replicas as they are known at some moment (:meth:`know`), it starts every
    request that starts before that moment (:meth:`advance`), so that what a serving engine
    exports can be read then (:meth:`waiting`, :meth:`running`).

    Requests go, in arrival order, to the replica where they can start soonest; ties between
    replicas idle alike go to the one whose serving interval sorts first by ``(ready, stop)``.
    A replica's stop is not known while it serves, so the replicas that became ready at the
    same moment are kept as one group whose ``i``-th member stops at the group's ``i``-th
    stop in time order: which pod that is does not matter, only the intervals do. A request
    that starts before ``now`` starts on a replica ready before ``now``; the replicas ready
    before ``now`` are all known by then (placed earlier) and every one still serving stops
    at ``now`` or later, so what :meth:`advance` decides up to ``now`` never changes."""

    def __init__(self, requests: Requests, spec: ServingSpec, *, count_running: bool = False):
        self.requests = requests
        self.spec = spec
        n = len(requests)
        self.start = np.full(n, np.nan)
        self.first = np.full(n, np.nan)
        self.last = np.full(n, np.nan)
        self._next = 0
        """Requests ``[0, _next)`` have started."""
        self._groups: dict[float, list[_Replica]] = {}
        """Replicas by the moment they became ready, in the order of their stops."""
        self._stopped: dict[float, int] = {}
        self._heap: list[tuple[float, tuple[float, int], _Replica]] = []
        self._ends: list[float] | None = [] if count_running else None
        """Last-token times of started requests not yet seen finished (:meth:`running`)."""
        self._arrival = requests.arrival.tolist()
        self._prompt = requests.prompt.tolist()
        self._output = requests.output.tolist()

    def know(
        self, stopped: Iterable[tuple[float, float]], serving: Iterable[float], now: float
    ) -> None:
        """The replicas as known at ``now``: ``stopped``, the ``[ready, stop)`` intervals of
        replicas that stopped; ``serving``, the ready times of replicas serving or to serve
        (their stop not yet known, ``now`` or later). Those ready before ``now`` are taken
        (the others cannot start a request before ``now``); ``now`` must not go back."""
        stops: dict[float, list[float]] = {}
        for ready, stop in stopped:
            if ready < now:
                stops.setdefault(ready, []).append(stop)
        members = {ready: len(s) for ready, s in stops.items()}
        for ready in serving:
            if ready < now:
                members[ready] = members.get(ready, 0) + 1
        for ready, count in members.items():
            group = self._groups.setdefault(ready, [])
            if len(group) != count and group:
                raise ValueError(f"the replicas ready at {ready:g} changed after they were known")
            if not group:
                slots = self.spec.max_sequences
                group += [_Replica(ready, slots) for _ in range(count)]
                for i, replica in enumerate(group):
                    heapq.heappush(self._heap, (ready, (ready, i), replica))
            known = sorted(stops.get(ready, ()))
            for i in range(self._stopped.get(ready, 0), len(known)):
                group[i].stop = known[i]
            self._stopped[ready] = len(known)

    def advance(self, until: float) -> None:
        """Start every request that starts before ``until``, in arrival order."""
        heap = self._heap
        arrival, prompt, output = self._arrival, self._prompt, self._output
        spec = self.spec
        prefill = spec.prefill_tokens_per_second
        base, per_sequence = spec.decode_seconds_per_token, spec.decode_seconds_per_sequence
        start, first, last, ends = self.start, self.first, self.last, self._ends
        k, n = self._next, len(arrival)
        while k < n:
            while heap:
                ready, _, replica = heap[0]
                begin = max(arrival[k], ready)
                if begin < replica.stop:
                    break
                heapq.heappop(heap)  # stopped before it could take this request: gone for good
            else:
                break  # no replica (yet): this request and all after it wait
            if begin >= until:
                break
            _, order, replica = heapq.heappop(heap)
            first_token = begin + prompt[k] / prefill
            slots = replica.slots
            slots.pop(0)  # the earliest free slot (free by ``begin``)
            batch = len(slots) - bisect.bisect_right(slots, first_token) + 1
            done = first_token + (output[k] - 1) * (base + per_sequence * (batch - 1))
            bisect.insort(slots, done)
            replica.prefill_free = first_token
            start[k], first[k], last[k] = begin, first_token, done
            if ends is not None:
                heapq.heappush(ends, done)
            heapq.heappush(heap, (replica.ready(), order, replica))
            k += 1
        self._next = k

    def waiting(self, t: float) -> int:
        """Requests waiting just before ``t`` (arrived before it, not started before it):
        vLLM's ``num_requests_waiting``. Call after :meth:`advance` to ``t``."""
        arrived = bisect.bisect_left(self._arrival, t)
        return arrived - min(self._next, arrived)

    def running(self, t: float) -> int:
        """Requests holding a replica's slot just before ``t`` (started before it, last
        token at ``t`` or later): vLLM's ``num_requests_running``. Call after
        :meth:`advance` to ``t``, with ``t`` never going back (``count_running`` given)."""
        ends = self._ends
        if ends is None:
            raise ValueError("running requests are counted only with count_running")
        while ends and ends[0] < t:
            heapq.heappop(ends)
        return len(ends)

    def served(self, horizon: float) -> Served:
        """What happened to each request, served up to ``horizon`` (after :meth:`advance` to
        it with every replica known): the requests not started are unserved."""
        return Served(self.requests, self.start, self.first, self.last, horizon)


def serve(
    requests: Requests,
    replicas: Sequence[tuple[float, float]],
    spec: ServingSpec,
    horizon: float,
) -> Served:
    """Serve ``requests`` on replicas serving over ``replicas`` (``[ready, stop)`` each, one
    entry per interval a replica served) as the module docstring describes."""
    server = Server(requests, spec)
    server.know(replicas, (), math.inf)
    server.advance(horizon)
    return server.served(horizon)


@dataclass(frozen=True)
class SloReport:
    """The SLO figures of a served window (see :func:`slo_report`)."""

    requests: int
    unserved: int
    missed: int
    missed_share: float | None
    violation_minutes: float
    ttft: dict[str, float | None]
    tpot: dict[str, float | None]
    e2e: dict[str, float | None]
    cold_start_requests: int
    cold_start_wait: dict[str, float | None]
    waiting_at_start: int
    """Requests waiting when the window begins: a backlog carried into it."""
    oldest_wait_at_start: float
    """How long the oldest of them had waited by then (0 when none)."""


def carried_backlog(served: Served, start: float) -> tuple[int, float]:
    """The requests that arrived before ``start`` and had not started by it (vLLM's
    ``num_requests_waiting`` at ``start``), and how long the oldest had waited then."""
    arrival = served.requests.arrival
    waiting = (arrival < start) & ~(served.start < start)
    if not waiting.any():
        return 0, 0.0
    return int(waiting.sum()), float(start - arrival[waiting].min())


def _quantile(values: FloatArray, q: float) -> float | None:
    """Nearest-rank ``q``-th percentile of the finite values (None when none)."""
    return nearest_rank(values[np.isfinite(values)], q)


def _summary(values: FloatArray, q: float) -> dict[str, float | None]:
    kept = values[np.isfinite(values)]
    return {
        "mean": float(kept.mean()) if kept.size else None,
        "p50": _quantile(values, 50),
        f"p{q:g}": _quantile(values, q),
        "max": float(kept.max()) if kept.size else None,
    }


def misses(served: Served, slo: SloSpec) -> npt.NDArray[np.bool_]:
    """Per request: it missed a stated objective (its own TTFT, TPOT or E2E above the
    target; an unserved request misses every one)."""
    missed = served.unserved.copy()
    for target, values in (
        (slo.ttft_seconds, served.ttft()),
        (slo.tpot_seconds, served.tpot()),
        (slo.e2e_seconds, served.e2e()),
    ):
        if target is not None:
            missed |= np.nan_to_num(values, nan=0.0) > target
    return missed


def violation_windows(served: Served, slo: SloSpec, start: float, end: float) -> float:
    """Seconds of ``[start, end)`` in windows that violate the SLO: the window is cut into
    ``window_seconds`` pieces from ``start``; a piece violates when, among the requests that
    arrived in it, the ``percentile`` of a stated metric is above its target (unserved
    requests count with a TTFT censored at the horizon and an infinite TPOT and E2E). Pieces
    without requests do not violate."""
    arrival = served.requests.arrival
    inside = (arrival >= start) & (arrival < end)
    if not inside.any():
        return 0.0
    width = slo.window_seconds
    piece = ((arrival[inside] - start) // width).astype(np.int64)
    unserved = served.unserved[inside]
    metrics = [
        (slo.ttft_seconds, served.ttft()[inside]),
        (slo.tpot_seconds, np.where(unserved, np.inf, served.tpot()[inside])),
        (slo.e2e_seconds, np.where(unserved, np.inf, served.e2e()[inside])),
    ]
    bounds = np.flatnonzero(np.diff(piece)) + 1
    total = 0.0
    for group in np.split(np.arange(piece.size), bounds):
        bad = False
        for target, values in metrics:
            if target is None:
                continue
            chosen = values[group]
            chosen = chosen[~np.isnan(chosen)]
            q = nearest_rank(chosen, slo.percentile)
            if q is not None and q > target:
                bad = True
                break
        if bad:
            a = start + piece[group[0]] * width
            total += min(a + width, end) - a
    return total


def slo_report(
    served: Served,
    slo: SloSpec,
    serving_at_arrival: npt.NDArray[np.int64],
    start: float,
    end: float,
) -> SloReport:
    """The SLO figures of the requests that arrived in ``[start, end)``:

    * ``missed``: requests that missed a stated objective (:func:`misses`), and their share;
    * ``violation_minutes``: :func:`violation_windows` in minutes;
    * ``ttft``, ``tpot``, ``e2e``: mean, p50, the SLO's percentile and max (nearest rank;
      TTFT includes unserved requests, censored at the horizon);
    * ``cold_start_requests`` / ``cold_start_wait``: the requests that arrived while no
      replica served (``serving_at_arrival`` is 0: scaled to zero, or not yet up) and their
      wait in the queue before prefill (censored at the horizon when never served);
    * ``waiting_at_start`` / ``oldest_wait_at_start``: :func:`carried_backlog` at ``start``
      (a cold start's backlog still draining when the window begins shows here).
    """
    arrival = served.requests.arrival
    inside = (arrival >= start) & (arrival < end)
    count = int(inside.sum())
    missed = int((misses(served, slo) & inside).sum())
    cold = inside & (serving_at_arrival == 0)
    q = slo.percentile
    carried, oldest = carried_backlog(served, start)
    return SloReport(
        requests=count,
        unserved=int((served.unserved & inside).sum()),
        missed=missed,
        missed_share=missed / count if count else None,
        violation_minutes=violation_windows(served, slo, start, end) / 60,
        ttft=_summary(served.ttft()[inside], q),
        tpot=_summary(served.tpot()[inside], q),
        e2e=_summary(served.e2e()[inside], q),
        cold_start_requests=int(cold.sum()),
        cold_start_wait=_summary(served.wait()[cold], q),
        waiting_at_start=carried,
        oldest_wait_at_start=oldest,
    )
