"""Where a run's idle GPU-hours went (pure): the autoscaler's paid GPUs that no pod held,
split by why (definitions in docs/inference.md, "Where the net extra goes").

At each moment, of the GPUs of the autoscaler's nodes:

* **launching**: GPUs of nodes launched and not yet Ready (nothing can run there), split
  by what the node was launched for (the headroom alone: placeholders or training; else
  replicas, with or without headroom pods in the same launch);
* **waiting for a gang**: GPUs of Ready nodes held by no pod while a headroom job (a
  training gang) waits to be placed, up to that job's GPUs: the gang's other pods' nodes
  wait for the node it still lacks;
* **empty**: the rest of the Ready GPUs no pod holds: nodes nothing wants, until
  consolidation removes them (or something is placed there).

``launching + waiting + empty + held`` is the paid GPU-hours exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeSpan:
    """One node of the autoscaler: launched, Ready, stopped (terminated or the run's end)."""

    launched: float
    ready: float
    stop: float
    gpus: float
    for_headroom: bool
    """It was launched for the headroom's pods alone (else for replicas, alone or with
    headroom pods in the same launch)."""


Span = tuple[float, float, float]
"""``(from, to, gpus)``."""


@dataclass(frozen=True)
class IdleGpuHours:
    """A window's paid GPU-hours that no pod held, by why."""

    launching_for_replicas: float
    launching_for_headroom: float
    waiting_for_a_gang: float
    empty: float

    @property
    def launching(self) -> float:
        return self.launching_for_replicas + self.launching_for_headroom

    @property
    def total(self) -> float:
        return self.launching + self.waiting_for_a_gang + self.empty

    def rounded(self) -> dict[str, float]:
        """The JSON form, GPU-hours to two decimals."""
        return {
            "launching_for_replicas": round(self.launching_for_replicas, 2),
            "launching_for_headroom": round(self.launching_for_headroom, 2),
            "waiting_for_a_gang": round(self.waiting_for_a_gang, 2),
            "empty": round(self.empty, 2),
        }


def _steps(spans: Sequence[Span]) -> dict[float, float]:
    """The change of the GPUs ``spans`` hold at each of their ends."""
    changes: dict[float, float] = {}
    for a, b, g in spans:
        if b > a:
            changes[a] = changes.get(a, 0.0) + g
            changes[b] = changes.get(b, 0.0) - g
    return changes


def split_idle(
    nodes: Sequence[NodeSpan],
    held: Sequence[Span],
    waiting: Sequence[Span],
    start: float,
    end: float,
) -> IdleGpuHours:
    """The idle GPU-hours over ``[start, end)`` of ``nodes``, given the GPUs pods ``held``
    on them (replicas and headroom, while placed) and the headroom jobs ``waiting`` to be
    placed (each span its job's GPUs)."""
    launching_r = [(n.launched, min(n.ready, n.stop), n.gpus) for n in nodes if not n.for_headroom]
    launching_h = [(n.launched, min(n.ready, n.stop), n.gpus) for n in nodes if n.for_headroom]
    ready = [(n.ready, n.stop, n.gpus) for n in nodes]
    every = [_steps(spans) for spans in (launching_r, launching_h, ready, held, waiting)]
    cuts = {start, end} | {t for changes in every for t in changes}
    level = [0.0] * len(every)
    out = [0.0, 0.0, 0.0, 0.0]
    for a, b in itertools.pairwise(sorted(cuts)):
        level = [v + changes.get(a, 0.0) for v, changes in zip(level, every, strict=True)]
        if b <= start or a >= end:
            continue
        span = min(b, end) - max(a, start)
        launching_r_now, launching_h_now, ready_now, held_now, waiting_now = level
        free = ready_now - held_now
        gang = min(max(free, 0.0), waiting_now)
        for i, value in enumerate((launching_r_now, launching_h_now, gang, free - gang)):
            out[i] += value * span
    return IdleGpuHours(*(v / 3600 for v in out))
