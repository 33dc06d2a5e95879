"""Admission fair sharing: a team's work ordered by the usage of its local queues.

As in Kueue (``admissionScope: UsageBasedAdmissionFairSharing`` on a ClusterQueue, the
Configuration's ``admissionFairSharing``), a team that opts in orders its pending work by the
*score* of the local queue each workload came through (lowest first), then priority, then
submit time. A local queue's score is Σ weight(resource) × (consumed + penalty), in base units
(cores, bytes, devices; weight 1 unless given), divided by the local queue's weight:

- ``consumed`` is sampled every ``usage_sampling_seconds`` from the first cycle on:
  consumed ← (1 − a) × consumed + a × (requests of the queue's running work) + penalty, with
  a = 1 − 0.5^(sampling / half-life); the penalty is then cleared;
- ``penalty``: every admission adds a × the workload's requests at once (Kueue's entry
  penalty), so a queue's later work falls behind within the same moment.

Between two samples the running work only changes at events, and a sample at an event's
moment sees the work that ran up to it, so :class:`UsageLedger` applies any number of samples
in closed form: the result depends only on the event sequence, never on wall time.

Work that names its team rather than a local queue counts under the team's name. The control
loop keeps the ledger and hands each cycle the scores (``Snapshot.queue_usage``); within a
cycle, :class:`FairOrder` adds the penalties of the cycle's own admissions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from fleetshare.model.quantity import MILLI
from fleetshare.model.workload import Workload
from fleetshare.policy.schema import AdmissionFairSharing, Policy


def queue_of(wl: Workload) -> str:
    """The local queue a workload's usage counts under (its team's name when it named none)."""
    return wl.queue or wl.team


def alpha(elapsed: float, half_life: float) -> float:
    """The weight of new usage after ``elapsed`` seconds: 1 − 0.5^(elapsed / half-life)
    (0 with no half-life: Kueue then forgets usage, and charges no penalty)."""
    if half_life <= 0:
        return 0.0
    return 1.0 - math.pow(0.5, elapsed / half_life)


def _base_units(requests: Mapping[str, int]) -> dict[str, float]:
    return {name: amount / MILLI for name, amount in requests.items()}


def weighted(amounts: Mapping[str, float], settings: AdmissionFairSharing) -> float:
    """Σ weight(resource) × amount (weight 1 unless given)."""
    weights = settings.resource_weights
    return sum(weights.get(name, 1.0) * value for name, value in amounts.items())


def queue_weights(policy: Policy) -> dict[str, float]:
    """Every local queue's weight (1 unless its team gives one)."""
    return {q: w for team in policy.teams for q, w in team.local_queue_weights.items()}


def divide(score: float, weight: float) -> float:
    """A score over a queue's weight; a queue of weight 0 always comes last."""
    if weight <= 0:
        return math.inf
    return score / weight


class UsageLedger:
    """Consumed resources and pending penalties per local queue, kept across cycles by the
    control loop (see the module docstring)."""

    def __init__(self, settings: AdmissionFairSharing) -> None:
        self.settings = settings
        self.consumed: dict[str, dict[str, float]] = {}
        self.penalty: dict[str, dict[str, float]] = {}
        self.running: dict[str, dict[str, float]] = {}
        """Per queue, the requests of its running work since the last :meth:`observe`."""
        self.anchor: float | None = None
        """When sampling started (the first :meth:`advance`)."""
        self.samples = 0
        """Samples taken so far (the next is at ``anchor + (samples + 1) × interval``)."""

    def advance(self, now: float) -> None:
        """Take the samples due up to ``now`` (inclusive), each seeing the running work
        observed last (what ran until ``now``)."""
        interval = self.settings.usage_sampling_seconds
        if self.anchor is None:
            self.anchor = now
            return
        due = math.floor((now - self.anchor) / interval + 1e-9)
        steps = due - self.samples
        if steps <= 0:
            return
        self.samples = due
        a = alpha(interval, self.settings.usage_half_life_seconds)
        keep = (1.0 - a) ** (steps - 1)
        for queue in set(self.consumed) | set(self.penalty) | set(self.running):
            old = self.consumed.get(queue, {})
            used = self.running.get(queue, {})
            penalty = self.penalty.pop(queue, {})
            out: dict[str, float] = {}
            for name in set(old) | set(used) | set(penalty):
                first = (1.0 - a) * old.get(name, 0.0) + a * used.get(name, 0.0)
                first += penalty.get(name, 0.0)
                # further samples with the same running work: c_n = u + (1 − a)^(n−1)(c_1 − u)
                value = used.get(name, 0.0) + keep * (first - used.get(name, 0.0))
                if value > 1e-12:
                    out[name] = value
            if out:
                self.consumed[queue] = out
            else:
                self.consumed.pop(queue, None)

    def observe(self, running: Iterable[Workload], teams: set[str]) -> None:
        """The work running now (of teams with admission fair sharing), per queue."""
        per_queue: dict[str, dict[str, float]] = {}
        for wl in running:
            if wl.team not in teams:
                continue
            into = per_queue.setdefault(queue_of(wl), {})
            for name, value in _base_units(wl.total_requests()).items():
                into[name] = into.get(name, 0.0) + value
        self.running = per_queue

    def admitted(self, wl: Workload) -> None:
        """Charge the entry penalty of an admission."""
        a = alpha(self.settings.usage_sampling_seconds, self.settings.usage_half_life_seconds)
        if a <= 0:
            return
        into = self.penalty.setdefault(queue_of(wl), {})
        for name, value in _base_units(wl.total_requests()).items():
            into[name] = into.get(name, 0.0) + a * value

    def scores(self, weights: Mapping[str, float]) -> dict[str, float]:
        """Each queue's score now: weighted consumed + pending penalty, over its weight."""
        out: dict[str, float] = {}
        for queue in set(self.consumed) | set(self.penalty):
            amount = weighted(self.consumed.get(queue, {}), self.settings)
            amount += weighted(self.penalty.get(queue, {}), self.settings)
            out[queue] = divide(amount, weights.get(queue, 1.0))
        return out


class FairOrder:
    """Queue scores within one cycle: the snapshot's, plus the penalties of the cycle's own
    admissions."""

    def __init__(
        self,
        settings: AdmissionFairSharing,
        base: Mapping[str, float],
        weights: Mapping[str, float],
    ) -> None:
        self._settings = settings
        self._base = base
        self._weights = weights
        self._added: dict[str, float] = {}
        self._alpha = alpha(settings.usage_sampling_seconds, settings.usage_half_life_seconds)

    def score(self, queue: str) -> float:
        """The queue's score now."""
        return self._base.get(queue, 0.0) + self._added.get(queue, 0.0)

    def admitted(self, wl: Workload) -> None:
        """``wl`` was admitted: its queue pays the entry penalty."""
        if self._alpha <= 0:
            return
        queue = queue_of(wl)
        penalty = self._alpha * weighted(_base_units(wl.total_requests()), self._settings)
        self._added[queue] = self._added.get(queue, 0.0) + divide(
            penalty, self._weights.get(queue, 1.0)
        )
