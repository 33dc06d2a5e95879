"""The serving engine's gauges as a scaler reads them through Prometheus (pure).

A serving engine exports gauges, vLLM's ``num_requests_waiting`` (requests queued, not yet
scheduled) and ``num_requests_running`` (requests in the running batch, prefill or decode);
the trigger reads the service's total (``sum`` over its replicas). As for the request rate
(:func:`fleetshare.inference.traffic.observed_rate`), Prometheus scrapes them at every
multiple of ``scrape_interval_seconds`` and the scaler polls every
``polling_interval_seconds``. For a counter the window is ``rate(counter[window])``; for a
gauge it is ``avg_over_time(gauge[window])``: the mean of the values scraped in ``(now -
window, now]`` (0 when none, an empty result read with KEDA's ``ignoreNullValues``). A step of
the gauge thus reaches the scaler a scrape late and, averaged, at full height a window later.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WAITING = "queue"
RUNNING = "running"
GAUGES = (WAITING, RUNNING)
"""The trigger metrics read from the serving engine's gauges (waiting and running requests)."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """The gauges' values at one scrape."""

    at: float
    waiting: int
    running: int


def scrape_times(after: float, until: float, interval: float) -> list[float]:
    """The scrape instants in ``(after, until]``: the multiples of ``interval`` from 0."""
    first = 0 if after < 0 else math.floor(after / interval + 1e-9) + 1
    last = math.floor(until / interval + 1e-9)
    return [k * interval for k in range(first, last + 1)]


def avg_over_time(scrapes: Sequence[Scrape], now: float, window: float) -> dict[str, float]:
    """Each gauge as ``avg_over_time(gauge[window])`` at ``now``: the mean of the ``scrapes``
    in ``(now - window, now]`` (0 when none)."""
    inside = [s for s in scrapes if now - window < s.at <= now]
    if not inside:
        return {WAITING: 0.0, RUNNING: 0.0}
    return {
        WAITING: sum(s.waiting for s in inside) / len(inside),
        RUNNING: sum(s.running for s in inside) / len(inside),
    }
