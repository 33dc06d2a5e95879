"""Request-rate series a service follows: generated patterns (seeded), or read elsewhere.

A :class:`Traffic` is a step function: ``rates[i]`` requests per second from ``times[i]`` to
the next time (the last to ``end``). Patterns are sampled every ``step_seconds``; noise, when
asked, multiplies each sample by a seeded normal factor ``1 + noise * N(0, 1)`` (never below
zero), so the same seed gives the same series.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetshare.inference.spec import DAY, HOUR, PatternSpec


@dataclass(frozen=True, slots=True)
class Traffic:
    """Requests per second as a step function over ``[times[0], end)``."""

    times: tuple[float, ...]
    rates: tuple[float, ...]
    end: float
    source: str = ""
    _arrived: tuple[float, ...] = field(init=False, repr=False, compare=False)
    """Requests arrived before each time (the rate's integral up to it)."""

    def __post_init__(self) -> None:
        if not self.times or len(self.times) != len(self.rates):
            raise ValueError("traffic needs as many rates as times, at least one")
        if any(b <= a for a, b in zip(self.times, self.times[1:], strict=False)):
            raise ValueError("traffic times must increase")
        if self.end <= self.times[-1]:
            raise ValueError("traffic must end after its last time")
        if any(r < 0 for r in self.rates):
            raise ValueError("traffic rates must be >= 0")
        spans = [b - a for a, b in itertools.pairwise((*self.times, self.end))]
        sums = itertools.accumulate((r * d for r, d in zip(self.rates, spans, strict=True)))
        object.__setattr__(self, "_arrived", (0.0, *sums))

    def at(self, t: float) -> float:
        """The rate at ``t`` (0 before the first time and from ``end`` on)."""
        if t < self.times[0] or t >= self.end:
            return 0.0
        return self.rates[bisect.bisect_right(self.times, t) - 1]

    def steps(self) -> list[tuple[float, float, float]]:
        """``(start, stop, rate)`` of every step."""
        stops = (*self.times[1:], self.end)
        return list(zip(self.times, stops, self.rates, strict=True))

    def peak(self) -> float:
        """The highest rate."""
        return max(self.rates)

    def arrived(self, t: float) -> float:
        """Requests arrived in ``[times[0], t)``: the rate's integral (a request counter)."""
        if t <= self.times[0]:
            return 0.0
        if t >= self.end:
            return self._arrived[-1]
        i = bisect.bisect_right(self.times, t) - 1
        return self._arrived[i] + self.rates[i] * (t - self.times[i])


def _diurnal(s: PatternSpec, peak: float) -> Callable[[float], float]:
    def rate(t: float) -> float:
        phase = 2 * math.pi * ((t / HOUR - s.peak_hour) % 24) / 24
        return s.base_rps + (peak - s.base_rps) * (1 + math.cos(phase)) / 2

    return rate


def _office(s: PatternSpec, peak: float) -> Callable[[float], float]:
    def rate(t: float) -> float:
        hour = (t % DAY) / HOUR
        weekday = int(t // DAY) % 7 < 5  # t=0 is a Monday (the autoscaler's clock start)
        open_ = s.open_hour <= hour < s.close_hour and (weekday or not s.weekdays_only)
        return peak if open_ else s.base_rps

    return rate


def _viral(s: PatternSpec, peak: float) -> Callable[[float], float]:
    growth = math.log(peak / s.base_rps) / s.ramp_seconds

    def rate(t: float) -> float:
        if t < s.at_seconds:
            return s.base_rps
        return s.base_rps * math.exp(growth * min(t - s.at_seconds, s.ramp_seconds))

    return rate


def _flash(s: PatternSpec, peak: float) -> Callable[[float], float]:
    def rate(t: float) -> float:
        since = t - s.at_seconds
        if since < 0:
            return s.base_rps
        if since < s.ramp_seconds:
            return s.base_rps + (peak - s.base_rps) * since / s.ramp_seconds
        return s.base_rps + (peak - s.base_rps) * math.exp(
            -(since - s.ramp_seconds) / s.decay_seconds
        )

    return rate


_PATTERNS: dict[str, Callable[[PatternSpec, float], Callable[[float], float]]] = {
    "diurnal": _diurnal,
    "office-hours": _office,
    "viral-ramp": _viral,
    "flash-crowd": _flash,
}

DEFAULT_FACTOR = 10.0
"""Peak over base when a pattern gives no ``peak_rps`` (the issue's 10x)."""


def generate(spec: PatternSpec) -> Traffic:
    """The pattern sampled every ``step_seconds`` over ``duration_seconds``:

    * ``constant``: ``base_rps`` throughout;
    * ``diurnal``: a cosine day between ``base_rps`` (night) and ``peak_rps`` at ``peak_hour``;
    * ``office-hours``: ``peak_rps`` from ``open_hour`` to ``close_hour`` (weekdays, with t=0 a
      Monday 00:00 UTC), ``base_rps`` otherwise -- a step at opening;
    * ``viral-ramp``: ``base_rps`` until ``at_seconds``, then exponential growth to ``peak_rps``
      within ``ramp_seconds`` (10x in 300 s by default), which then holds;
    * ``flash-crowd``: a linear rise to ``peak_rps`` within ``ramp_seconds`` at ``at_seconds``,
      then exponential decay back towards ``base_rps`` (time constant ``decay_seconds``).
    """
    if spec.base_rps == 0 and spec.pattern == "viral-ramp":
        raise ValueError("a viral ramp grows exponentially from base_rps: it must be > 0")
    if spec.base_rps == 0 and spec.peak_rps is None and spec.pattern != "constant":
        raise ValueError("with base_rps 0, give peak_rps")
    peak = spec.peak_rps if spec.peak_rps is not None else spec.base_rps * DEFAULT_FACTOR
    if spec.pattern == "constant":
        return Traffic((0.0,), (spec.base_rps,), spec.duration_seconds, "constant")
    if peak < spec.base_rps:
        raise ValueError(f"peak_rps {peak:g} is below base_rps {spec.base_rps:g}")
    rate = _PATTERNS[spec.pattern](spec, peak)
    rng = random.Random(spec.seed)
    count = math.ceil(spec.duration_seconds / spec.step_seconds)
    times = tuple(i * spec.step_seconds for i in range(count))
    rates = []
    for t in times:
        value = rate(t)
        if spec.noise:
            value *= max(0.0, 1 + spec.noise * rng.gauss(0.0, 1.0))
        rates.append(value)
    return Traffic(times, tuple(rates), spec.duration_seconds, spec.pattern)


def from_samples(
    times: Sequence[float], rates: Sequence[float], end: float | None, source: str
) -> Traffic:
    """A series from samples (each rate holds until the next time; the last for the median
    spacing when ``end`` is not given)."""
    if end is None:
        gaps = sorted(b - a for a, b in itertools.pairwise(times))
        end = times[-1] + (gaps[len(gaps) // 2] if gaps else 60.0)
    return Traffic(tuple(times), tuple(rates), end, source)


def observed_rate(traffic: Traffic, now: float, window: float, scrape_interval: float) -> float:
    """The request rate as a scaler reading Prometheus sees it at ``now``: the request
    counter (:meth:`Traffic.arrived`) is scraped at every multiple of ``scrape_interval``;
    ``rate(counter[window])`` is the increase between the first and the last scrape in
    ``(now - window, now]`` over the time between them (0 with fewer than two scrapes, as
    KEDA reads an empty result with ``ignoreNullValues``). Prometheus extrapolates that
    increase to the window's edges, which with regular scrapes gives the same rate."""
    last = math.floor(now / scrape_interval + 1e-9) * scrape_interval
    first = (math.floor((now - window) / scrape_interval + 1e-9) + 1) * scrape_interval
    first = max(first, 0.0)
    if last - first < scrape_interval - 1e-9:
        return 0.0
    return (traffic.arrived(last) - traffic.arrived(first)) / (last - first)
