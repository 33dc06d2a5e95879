"""What a scaler is told: triggers, replica bounds, behaviour (KEDA ScaledObject / HPA v2).

Defaults are Kubernetes' and KEDA's documented ones: HPA tolerance 0.1, scale-up with no
stabilisation and at most max(+4 pods, +100%) per 15 s, scale-down stabilised over 300 s and
at most -100% per 15 s; KEDA's activation threshold 0 and cooldown (to zero) 300 s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fleetshare.inputs import Count, StrictModel

Metric = Literal["rps", "concurrency", "queue"]
"""What a trigger measures: requests per second, requests in flight, requests waiting."""


class ScalingPolicy(StrictModel):
    """HPA ``HPAScalingPolicy``: at most ``value`` pods (``Pods``) or percent (``Percent``) of
    the replicas at the start of the last ``period_seconds``."""

    type: Literal["Pods", "Percent"]
    value: Count = Field(gt=0)
    period_seconds: float = Field(gt=0, le=1800)


class ScalingRules(StrictModel):
    """HPA ``HPAScalingRules`` for one direction."""

    stabilization_window_seconds: float = Field(ge=0, le=3600)
    policies: list[ScalingPolicy]
    select_policy: Literal["Max", "Min", "Disabled"] = "Max"


def default_scale_up() -> ScalingRules:
    """HPA's default scale-up: no window; +4 pods or +100% per 15 s, whichever is more."""
    return ScalingRules(
        stabilization_window_seconds=0,
        policies=[
            ScalingPolicy(type="Pods", value=4, period_seconds=15),
            ScalingPolicy(type="Percent", value=100, period_seconds=15),
        ],
    )


def default_scale_down() -> ScalingRules:
    """HPA's default scale-down: 300 s window; down to zero extra pods per 15 s (-100%)."""
    return ScalingRules(
        stabilization_window_seconds=300,
        policies=[ScalingPolicy(type="Percent", value=100, period_seconds=15)],
    )


class Behavior(StrictModel):
    """HPA ``behavior``."""

    scale_up: ScalingRules = Field(default_factory=default_scale_up)
    scale_down: ScalingRules = Field(default_factory=default_scale_down)


class Trigger(StrictModel):
    """One metric and its target per replica (KEDA trigger / HPA metric with AverageValue);
    the service is active while some trigger's value is above its ``activation``."""

    metric: Metric
    target: float = Field(gt=0, description="per replica")
    activation: float = Field(default=0, ge=0)


class ScalerSpec(StrictModel):
    """A service's scaler: KEDA's ScaledObject over an HPA."""

    min_replicas: Count = Field(default=0, ge=0)
    max_replicas: Count = Field(default=100, ge=1)
    triggers: list[Trigger] = Field(min_length=1)
    polling_interval_seconds: float = Field(default=15, gt=0, le=3600)
    cooldown_seconds: float = Field(default=300, ge=0)
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    behavior: Behavior = Field(default_factory=Behavior)

    @model_validator(mode="after")
    def _bounds(self) -> ScalerSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}"
            )
        return self
