"""A service's scaler outside the simulator: each tick reads its triggers from their sources
(Prometheus queries) and decides the replicas with the same rules the simulator uses
(:func:`fleetshare.inference.scaler.decide`). The caller passes ``now`` and acts on the
decision (creates or deletes replicas)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import httpx

from fleetshare.inference.prometheus import MetricError, MetricSource, PrometheusSource
from fleetshare.inference.scaler import Decision, Reading, ScalerState, decide, fallback
from fleetshare.inference.service import floor_readings
from fleetshare.inference.spec import FloorSpec, ScalerSpec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Where wall-clock seconds (``time.time()``) count from."""


def prometheus_sources(spec: ScalerSpec, client: httpx.Client | None = None) -> list[MetricSource]:
    """One Prometheus source per trigger; every trigger must name its query (by address:
    a ScaledObject's ``serverAddress``)."""
    sources: list[MetricSource] = []
    for i, trigger in enumerate(spec.triggers):
        if trigger.prometheus is None:
            raise ValueError(
                f"triggers[{i}].prometheus: a live scaler reads each trigger from a query"
            )
        sources.append(PrometheusSource(trigger.prometheus, client))
    return sources


class LiveScaler:
    """A scaler and where its triggers come from; ``tick`` is one polling interval's turn."""

    def __init__(
        self,
        spec: ScalerSpec,
        sources: Sequence[MetricSource],
        state: ScalerState | None = None,
        floors: Sequence[FloorSpec] = (),
        clock_start: datetime = EPOCH,
    ) -> None:
        if len(sources) != len(spec.triggers):
            raise ValueError(f"{len(spec.triggers)} triggers but {len(sources)} sources")
        self.spec = spec
        self.sources = list(sources)
        self.floors = tuple(floors)
        """KEDA's cron triggers, read at each tick's ``now`` (seconds since ``clock_start``:
        the Unix epoch for a caller passing wall-clock time)."""
        self.clock_start = clock_start
        self.state = state if state is not None else ScalerState()
        """Where it starts: a new service's is empty; one taken over is
        :func:`~fleetshare.inference.scaler.resumed`."""
        self.last_readings: list[Reading] = []
        """What the last successful tick read."""
        self.failures = 0
        """Failed reads in a row (KEDA's fallback counts them)."""

    def readings(self, now: float | None = None) -> list[Reading]:
        """Every trigger's current value against its target (raises ``MetricError``), and at
        ``now`` the cron triggers whose window is open."""
        got = [
            Reading(source.read(), t.target, t.activation)
            for t, source in zip(self.spec.triggers, self.sources, strict=True)
        ]
        if now is not None:
            got += floor_readings(self.floors, now, self.clock_start)
        return got

    def tick(self, now: float, current: int | None = None) -> Decision:
        """The replicas wanted at ``now``. ``current``: the replicas that exist, when they
        differ from the last decision (someone else scaled). A failed read raises
        ``MetricError`` and leaves the state as it was (KEDA keeps the replicas), until
        ``fallback.failure_threshold`` reads in a row have failed: then the fallback's
        replicas are the decision."""
        try:
            got = self.readings(now)
        except MetricError:
            self.failures += 1
            fell_back = fallback(self.spec, self.state, now, self.failures)
            if fell_back is None:
                raise
            self.state = fell_back.state
            return fell_back
        self.failures = 0
        self.last_readings = got
        state = self.state
        if current is not None and current != state.replicas:
            state = ScalerState(current, state.proposals, state.events, state.last_active)
        decision = decide(self.spec, state, now, got)
        self.state = decision.state
        return decision
