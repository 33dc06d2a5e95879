"""The scaler's decision: how many replicas a service should have now (pure).

It follows the documented behaviour of KEDA over the Kubernetes HPA (autoscaling/v2):

* **Activation** (KEDA): the service is active while some reading is above its activation
  threshold. From zero replicas an active service goes to ``max(min_replicas, 1)``; with
  ``min_replicas: 0`` an inactive one goes to zero once ``cooldown_seconds`` have passed since
  it was last active (or since the start). Between one replica and the maximum the HPA decides.
* **Proposal** (HPA, AverageValue targets): per reading, ``ratio = value / (target *
  current)``; within ``tolerance`` of 1 the proposal is ``current``, else ``ceil(value /
  target)``. Several readings: the largest proposal.
* **Stabilisation** (HPA): every proposal is remembered; the recommendation is held at or
  above the smallest proposal of the scale-up window and at or below the largest of the
  scale-down window (so scale-down follows the highest proposal of the last 300 s).
* **Rate policies** (HPA): a scale-up is limited to what each policy allows counted from the
  replicas at the start of its period (``Pods``: + value; ``Percent``: * (1 + value/100),
  rounded up), ``select_policy`` Max taking the most permissive, Min the least, Disabled none;
  a scale-down likewise (``Percent`` rounded down). Changes of both directions within the
  period count, as in the HPA controller. Then ``min_replicas..max_replicas`` clamps.

Times are strict as in the HPA: a proposal or a change exactly one window or period old no
longer counts. The caller passes ``now``; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fleetshare.inference.spec import ScalerSpec, ScalingRules


@dataclass(frozen=True, slots=True)
class Reading:
    """One trigger's current value (the service's total) and its target per replica."""

    value: float
    target: float
    activation: float = 0.0


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A change of the replica count: ``change`` > 0 up, < 0 down."""

    at: float
    change: int


@dataclass(frozen=True, slots=True)
class ScalerState:
    """What the scaler remembers between decisions."""

    replicas: int = 0
    proposals: tuple[tuple[float, int], ...] = ()
    events: tuple[ScaleEvent, ...] = ()
    last_active: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The replicas wanted now, the state to pass next time, and why (for the event log)."""

    replicas: int
    state: ScalerState
    why: str
    reason: str = ""
    """A condition worth a warning: :data:`MAX_REPLICAS_BELOW_TRAFFIC` or :data:`FALLBACK`
    (empty otherwise)."""


def propose(current: int, readings: Sequence[Reading], tolerance: float) -> int:
    """The HPA's raw proposal for ``current`` replicas (``current`` >= 1)."""
    best = 0
    for r in readings:
        ratio = r.value / (r.target * current)
        best = max(
            best, current if abs(ratio - 1.0) <= tolerance else math.ceil(r.value / r.target)
        )
    return best


def stabilize(
    up: ScalingRules,
    down: ScalingRules,
    proposals: Sequence[tuple[float, int]],
    now: float,
    current: int,
    proposal: int,
) -> int:
    """The recommendation after the stabilisation windows (``proposals``: earlier ones)."""
    low = high = proposal
    for at, value in proposals:
        if at > now - up.stabilization_window_seconds:
            low = min(low, value)
        if at > now - down.stabilization_window_seconds:
            high = max(high, value)
    return min(max(current, low), high)


def _changed_within(events: Sequence[ScaleEvent], now: float, period: float, up: bool) -> int:
    return sum(abs(e.change) for e in events if e.at > now - period and (e.change > 0) == up)


def _period_start(events: Sequence[ScaleEvent], now: float, period: float, current: int) -> int:
    added = _changed_within(events, now, period, up=True)
    removed = _changed_within(events, now, period, up=False)
    return current - added + removed


def scale_up_limit(
    rules: ScalingRules, events: Sequence[ScaleEvent], now: float, current: int
) -> int:
    """The most replicas the scale-up policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    limits = []
    for p in rules.policies:
        start = _period_start(events, now, p.period_seconds, current)
        if p.type == "Pods":
            limits.append(start + p.value)
        else:
            limits.append(math.ceil(start * (1 + p.value / 100)))
    limit = max(limits) if rules.select_policy == "Max" else min(limits)
    return max(limit, current)


def scale_down_limit(
    rules: ScalingRules, events: Sequence[ScaleEvent], now: float, current: int
) -> int:
    """The fewest replicas the scale-down policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    limits = []
    for p in rules.policies:
        start = _period_start(events, now, p.period_seconds, current)
        if p.type == "Pods":
            limits.append(start - p.value)
        else:
            limits.append(math.floor(start * (1 - p.value / 100)))
    limit = min(limits) if rules.select_policy == "Max" else max(limits)
    return min(limit, current)


def _forget(spec: ScalerSpec, state: ScalerState, now: float) -> ScalerState:
    """Drop proposals and events too old to matter."""
    b = spec.behavior
    window = max(b.scale_up.stabilization_window_seconds, b.scale_down.stabilization_window_seconds)
    period = max(
        (p.period_seconds for r in (b.scale_up, b.scale_down) for p in r.policies), default=0.0
    )
    return replace(
        state,
        proposals=tuple(p for p in state.proposals if p[0] > now - window),
        events=tuple(e for e in state.events if e.at > now - period),
    )


MAX_REPLICAS_BELOW_TRAFFIC = "MaxReplicasBelowTraffic"
"""The reason a decision gives when the triggers ask for more than ``max_replicas``."""

FALLBACK = "Fallback"
"""The reason of a decision taken by KEDA's fallback (the metric could not be read)."""


def fallback(spec: ScalerSpec, state: ScalerState, now: float, failures: int) -> Decision | None:
    """KEDA's fallback after ``failures`` failed reads in a row (None: not yet, or no
    fallback: the replicas stay as they are)."""
    f = spec.fallback
    if f is None or failures < f.failure_threshold:
        return None
    current = state.replicas
    wanted = {
        "static": f.replicas,
        "currentReplicas": current,
        "currentReplicasIfHigher": max(current, f.replicas),
        "currentReplicasIfLower": min(current, f.replicas),
    }[f.behavior]
    # KEDA's fallback feeds the HPA a value that proposes these replicas: the proposal
    # counts in the stabilisation windows like any other
    state = replace(state, proposals=(*state.proposals, (now, wanted)))
    why = f"fallback ({f.behavior}) after {failures} failed reads"
    return replace(_to(state, now, wanted, why), reason=FALLBACK)


def _to(state: ScalerState, now: float, replicas: int, why: str) -> Decision:
    change = replicas - state.replicas
    events = (*state.events, ScaleEvent(now, change)) if change else state.events
    return Decision(replicas, replace(state, replicas=replicas, events=events), why)


def is_active(readings: Sequence[Reading]) -> bool:
    """KEDA's activation: some reading is above its activation threshold."""
    return any(r.value > r.activation for r in readings)


def decide(
    spec: ScalerSpec, state: ScalerState, now: float, readings: Sequence[Reading]
) -> Decision:
    """The replicas wanted at ``now`` given the triggers' ``readings``."""
    active = is_active(readings)
    state = _forget(spec, state, now)
    if active:
        state = replace(state, last_active=now)
    current = state.replicas
    idle = spec.idle()
    if current == 0:
        if active:
            return _to(state, now, max(spec.min_replicas, 1), "activated")
        if idle is None:
            return _to(state, now, spec.min_replicas, "below min_replicas")
        return Decision(0, state, "inactive")
    if not active and idle is not None:
        since = state.last_active if state.last_active is not None else 0.0
        if now - since >= spec.cooldown_seconds:
            return _to(replace(state, proposals=()), now, 0, "cooldown over: scaled to zero")
    low = max(spec.min_replicas, 1)
    if current > spec.max_replicas:
        return _to(state, now, spec.max_replicas, "above max_replicas")
    if current < low:
        return _to(state, now, low, "below min_replicas")
    proposal = propose(current, readings, spec.tolerance)
    b = spec.behavior
    wanted = stabilize(b.scale_up, b.scale_down, state.proposals, now, current, proposal)
    state = replace(state, proposals=(*state.proposals, (now, proposal)))
    limited = wanted
    if wanted > current:
        limited = min(wanted, scale_up_limit(b.scale_up, state.events, now, current))
    elif wanted < current:
        limited = max(wanted, scale_down_limit(b.scale_down, state.events, now, current))
    replicas = min(max(limited, low), spec.max_replicas)
    if proposal > spec.max_replicas:
        why = (
            f"{MAX_REPLICAS_BELOW_TRAFFIC}: max_replicas {spec.max_replicas}, the traffic "
            f"needs {proposal}"
        )
        return replace(_to(state, now, replicas, why), reason=MAX_REPLICAS_BELOW_TRAFFIC)
    if replicas == current:
        why = "held by stabilisation" if proposal != current and wanted == current else "steady"
        if limited != wanted:
            why = "held by rate policy"
        return Decision(current, state, why)
    why = f"proposal {proposal}"
    if wanted != proposal:
        why += f", stabilised to {wanted}"
    if limited != wanted:
        why += f", rate-limited to {limited}"
    if replicas != limited:
        why += f", clamped to {replicas}"
    return _to(state, now, replicas, why)


def resumed(
    replicas: int,
    now: float,
    changes: Sequence[ScaleEvent] = (),
    *,
    last_active: float | None = None,
) -> ScalerState:
    """The state a scaler starts from when it takes over ``replicas`` that exist (a restart
    of the controller, or another replica taking over): ``changes`` are the replica
    creations and deletions known from elsewhere (they count against the rate policies'
    periods as before). The proposals of the stabilisation windows are not known: the
    replicas that exist count as a proposal made ``now``, so neither direction moves before a
    proposal has held for its window after the take-over; and a service with replicas counts
    as active ``now`` (or at ``last_active`` where the controller recorded it, as KEDA's
    ``status.lastActiveTime``), so scale-to-zero waits a full ``cooldown_seconds`` from then.
    Both err on the side of keeping the replicas a little longer, never of removing them
    sooner."""
    proposals = ((now, replicas),) if replicas > 0 else ()
    return ScalerState(
        replicas,
        proposals,
        tuple(sorted(changes, key=lambda e: e.at)),
        last_active if last_active is not None else (now if replicas > 0 else None),
    )
