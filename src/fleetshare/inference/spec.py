"""What a scaler is told: triggers, replica bounds, behaviour (KEDA ScaledObject / HPA v2).

Defaults are Kubernetes' and KEDA's documented ones: HPA tolerance 0.1, scale-up with no
stabilisation and at most max(+4 pods, +100%) per 15 s, scale-down stabilised over 300 s and
at most -100% per 15 s; KEDA's activation threshold 0 and cooldown (to zero) 300 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from fleetshare.inference.forecast import DEFAULT_TREND
from fleetshare.inputs import Count, Name, StrictModel
from fleetshare.model.quantity import Quantities

HOUR = 3600.0
DAY = 86_400.0

Metric = Literal["rps", "concurrency", "queue", "running"]
"""What a trigger measures: requests per second, requests in flight (Little's law), requests
waiting (with ``serving``: the serving engine's queue, vLLM's ``num_requests_waiting``), requests
running (``serving`` only: vLLM's ``num_requests_running``)."""


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


class PrometheusQuery(StrictModel):
    """Where a live scaler reads a trigger (KEDA's ``prometheus`` scaler): a PromQL instant
    query against the Prometheus HTTP API at ``server_address``, whose result must be a
    scalar or a vector of one element. An empty vector reads 0 while ``ignore_null_values``
    (KEDA's default), else it is an error."""

    server_address: str | None = Field(
        default=None, pattern=r"^https?://\S+$", description="http(s)://host:port"
    )
    server: Name | None = Field(
        default=None,
        description="a Prometheus server by the name the admin lists it under (fleetshare "
        "serve's prometheus_servers); in fleetshare serve, the way to name one",
    )
    query: str = Field(min_length=1)
    ignore_null_values: bool = True
    timeout_seconds: float = Field(default=5, gt=0, le=300)

    @model_validator(mode="after")
    def _one_server(self) -> PrometheusQuery:
        if (self.server is None) == (self.server_address is None):
            raise ValueError("give server (a name the admin lists) or server_address")
        return self

    def at(self, servers: Mapping[str, str]) -> PrometheusQuery:
        """This query with ``server`` resolved to its address in ``servers`` (whether it
        may be queried at all is the caller's rule: fleetshare serve's ``LiveServices``)."""
        if self.server is None:
            return self
        return self.model_copy(update={"server_address": servers[self.server], "server": None})


class Trigger(StrictModel):
    """One metric and its target per replica (KEDA trigger / HPA metric with AverageValue);
    the service is active while some trigger's value is above its ``activation``; with
    several triggers the largest proposal wins. A live scaler reads it from ``prometheus``;
    the simulator computes it from the traffic (``queue`` and ``running``: from the serving
    model run during the simulation, when the service has one)."""

    metric: Metric
    target: float = Field(gt=0, description="per replica")
    activation: float = Field(default=0, ge=0)
    prometheus: PrometheusQuery | None = None


class FallbackSpec(StrictModel):
    """KEDA's ``fallback``: after ``failure_threshold`` failed reads in a row of a trigger,
    the scaler sets ``replicas`` (``static``), keeps the current count (``currentReplicas``),
    or the larger (``currentReplicasIfHigher``) or smaller (``currentReplicasIfLower``) of
    the two, until a read succeeds."""

    failure_threshold: Count = Field(ge=1)
    replicas: Count = Field(ge=0)
    behavior: Literal[
        "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"
    ] = "static"


class ScalerSpec(StrictModel):
    """A service's scaler: KEDA's ScaledObject over an HPA."""

    min_replicas: Count = Field(default=0, ge=0)
    max_replicas: Count = Field(default=100, ge=1)
    triggers: list[Trigger] = Field(min_length=1)
    polling_interval_seconds: float = Field(default=15, gt=0, le=3600)
    cooldown_seconds: float = Field(default=300, ge=0)
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    behavior: Behavior = Field(default_factory=Behavior)
    idle_replicas: Literal[0] | None = Field(
        default=None,
        description="KEDA's idleReplicaCount: with no trigger active (after the cooldown) the "
        "service goes to this many replicas, below min_replicas (KEDA supports only 0)",
    )
    fallback: FallbackSpec | None = None

    @model_validator(mode="after")
    def _bounds(self) -> ScalerSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}"
            )
        if self.idle_replicas is not None and self.idle_replicas >= self.min_replicas:
            raise ValueError(
                f"idle_replicas {self.idle_replicas} must be below min_replicas "
                f"{self.min_replicas} (KEDA's idleReplicaCount)"
            )
        return self

    def idle(self) -> int | None:
        """The replicas of an inactive service once the cooldown is over (None: the HPA
        keeps at least ``min_replicas``)."""
        if self.min_replicas == 0:
            return 0
        return self.idle_replicas


class PatternSpec(StrictModel):
    """A generated pattern (see :func:`generate`)."""

    pattern: Literal["constant", "diurnal", "office-hours", "viral-ramp", "flash-crowd"]
    base_rps: float = Field(ge=0, le=1e7, description="0: no traffic (e.g. at night)")
    peak_rps: float | None = Field(default=None, gt=0, le=1e8)
    duration_seconds: float = Field(default=DAY, gt=0, le=31 * DAY)
    step_seconds: float = Field(default=60, gt=0, le=HOUR)
    at_seconds: float = Field(default=2 * HOUR, ge=0, description="viral ramp / flash crowd")
    ramp_seconds: float = Field(default=300, gt=0, le=DAY)
    decay_seconds: float = Field(default=1800, gt=0, le=DAY, description="flash crowd")
    peak_hour: float = Field(default=14, ge=0, lt=24, description="diurnal (UTC)")
    open_hour: float = Field(default=9, ge=0, lt=24, description="office hours (UTC)")
    close_hour: float = Field(default=17, gt=0, le=24, description="office hours (UTC)")
    weekdays_only: bool = True
    noise: float = Field(default=0, ge=0, le=1)
    seed: int = 0


class CsvTrafficSpec(StrictModel):
    """Request rates from a CSV file (relative to the scenario): one row per sample."""

    csv: str = Field(min_length=1)
    time_column: str = "time"
    rate_column: str = "rps"
    end_seconds: float | None = Field(default=None, gt=0)


class DlrmTrafficSpec(StrictModel):
    """A demand curve from the DLRM trace: live instances (of one app, or all) times
    ``rps_per_instance`` (the assumption: every live instance was sized for that load)."""

    app: str | None = None
    role: Literal["HN", "CN", "all"] = "HN"
    rps_per_instance: float = Field(default=10, gt=0)
    start_day: float = Field(default=0, ge=0)
    days: float = Field(default=1, gt=0, le=31)
    step_seconds: float = Field(default=60, gt=0, le=3600)


class RequestTraceSpec(StrictModel):
    """Requests from a file in the format of a public LLM serving trace (relative to the
    scenario): ``azure`` (CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``) or ``mooncake``
    (JSON lines ``timestamp`` ms, ``input_length``, ``output_length``). Replayed ``speedup``
    times faster and ``copies`` times over (each copy shifted by a seeded uniform
    ``[0, jitter_seconds)``)."""

    file: str = Field(min_length=1)
    format: Literal["azure", "mooncake"] = "azure"
    speedup: float = Field(default=1, gt=0, le=1000)
    copies: Count = Field(default=1, ge=1, le=1000)
    jitter_seconds: float = Field(default=60, ge=0, le=86_400)
    seed: int = 0
    step_seconds: float = Field(
        default=1, gt=0, le=HOUR, description="bins of the rate series the scaler reads"
    )


class TrafficRef(StrictModel):
    """Where a service's traffic comes from: ``pattern`` (generated), ``csv``, ``dlrm`` (rate
    series), or ``requests`` (a request trace file)."""

    pattern: PatternSpec | None = None
    csv: CsvTrafficSpec | None = None
    dlrm: DlrmTrafficSpec | None = None
    requests: RequestTraceSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> TrafficRef:
        given = [k for k in ("pattern", "csv", "dlrm", "requests") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of pattern, csv, dlrm, requests")
        return self


class TokenMixSpec(StrictModel):
    """Token counts of requests drawn from a rate pattern: ``azure-conv-2023`` draws (prompt,
    output) pairs from the bundled minute of the Azure LLM inference trace 2023
    (conversation); ``lognormal`` draws each from a lognormal with the given median and
    sigma (of the logarithm)."""

    mix: Literal["azure-conv-2023", "lognormal"] = "azure-conv-2023"
    prompt_median: float = Field(default=1000, gt=0, le=1e6)
    prompt_sigma: float = Field(default=1.0, ge=0, le=5)
    output_median: float = Field(default=200, gt=0, le=1e6)
    output_sigma: float = Field(default=1.0, ge=0, le=5)
    seed: int = 0


class ServingSpec(StrictModel):
    """One replica's speed (the request-level serving model, inference/serving.py): a
    prompt is prefilled at ``prefill_tokens_per_second`` (one prompt at a time); then each
    output token takes ``decode_seconds_per_token`` plus ``decode_seconds_per_sequence`` for
    every other sequence decoding on the replica when its decode starts; at most
    ``max_sequences`` requests are in prefill or decode at once (the batching limit); the rest
    wait in the service's queue (first come, first served)."""

    prefill_tokens_per_second: float = Field(gt=0, le=1e8)
    decode_seconds_per_token: float = Field(gt=0, le=10)
    decode_seconds_per_sequence: float = Field(default=0, ge=0, le=10)
    max_sequences: Count = Field(ge=1, le=100_000)
    tokens: TokenMixSpec = Field(
        default_factory=TokenMixSpec, description="requests drawn from a rate pattern"
    )


class SloSpec(StrictModel):
    """Latency objectives as users state them: the ``percentile`` (99) of time to first
    token, of time per output token, and of end-to-end latency, at most these seconds (any
    of them; at least one)."""

    ttft_seconds: float | None = Field(default=None, gt=0)
    tpot_seconds: float | None = Field(default=None, gt=0)
    e2e_seconds: float | None = Field(default=None, gt=0)
    percentile: float = Field(default=99, gt=0, le=100)
    window_seconds: float = Field(default=60, gt=0, le=HOUR, description="a violation minute")

    @model_validator(mode="after")
    def _some(self) -> SloSpec:
        if self.ttft_seconds is None and self.tpot_seconds is None and self.e2e_seconds is None:
            raise ValueError("give ttft_seconds, tpot_seconds or e2e_seconds")
        return self


class ObservedRateSpec(StrictModel):
    """What the scaler reads of the request rate, as from Prometheus: the request counter is
    scraped every ``scrape_interval_seconds``, and ``rate(...[window_seconds])`` is the
    increase between the first and the last scrape within the window over their distance.
    The scaler reads it every ``polling_interval_seconds`` (KEDA's polling)."""

    window_seconds: float = Field(default=60, gt=0, le=DAY)
    scrape_interval_seconds: float = Field(default=15, gt=0, le=HOUR)

    @model_validator(mode="after")
    def _two_scrapes(self) -> ObservedRateSpec:
        if self.window_seconds < 2 * self.scrape_interval_seconds:
            raise ValueError(
                "window_seconds must hold at least two scrapes (2 x scrape_interval_seconds)"
            )
        return self


class ReplicaSpec(StrictModel):
    """One replica's pod: requests and placement."""

    requests: Quantities
    node_selector: dict[str, str] = Field(default_factory=dict)


class StartupProfileSpec(StrictModel):
    """Start-up looked up in the documented table (inference/startup.py): the model's size,
    how the image gets to a new node, and where the weights are read from; node launch to
    Ready comes from the table per instance family."""

    model_size: Literal["8b", "70b"]
    image: Literal["pull", "lazy", "preloaded"] = "pull"
    weights: Literal["local-disk", "object-storage"] = "object-storage"


class StartupSpec(StrictModel):
    """From a replica placed on a node to it serving: the image pull (skipped where the node
    already pulled the service's image, or boots with it preloaded) and the model load.
    ``profile`` takes both from the documented table instead (and the node launch per
    instance type), in place of the two figures."""

    image_pull_seconds: float = Field(default=60, ge=0, le=7200)
    model_load_seconds: float = Field(default=60, ge=0, le=7200)
    preloaded_pools: list[str] = Field(
        default_factory=list,
        description="node pools whose nodes boot with the service's image already in the "
        "container store (a secondary boot disk or disk snapshot built from it, e.g. GKE's "
        "secondary boot disks): a pod placed on one skips the pull",
    )
    profile: StartupProfileSpec | None = None

    @model_validator(mode="after")
    def _one_way(self) -> StartupSpec:
        given = self.model_fields_set & {"image_pull_seconds", "model_load_seconds"}
        if self.profile is not None and given:
            raise ValueError(f"give profile or {' and '.join(sorted(given))}, not both")
        return self


class HeadroomSpec(StrictModel):
    """Warm headroom: low-priority placeholder pods shaped like a replica (running the
    service's image, so a node they held has it pulled) that any real replica preempts:
    ``pods`` plus ``percent`` of the wanted replicas (rounded up)."""

    pods: Count = Field(default=0, ge=0)
    percent: float = Field(default=0, ge=0, le=1000)
    priority: str = Field(default="placeholder", min_length=1)
    held_by: Literal["placeholder", "training"] = Field(
        default="placeholder",
        description="placeholder: idle pods running the service's image; training: "
        "preemptible training pods of the same shape doing useful work (their node has not "
        "pulled the service's image), checkpointing every checkpoint_seconds",
    )
    checkpoint_seconds: float = Field(default=1800, gt=0, le=7 * 86_400)
    team: str | None = Field(
        default=None,
        min_length=1,
        description="held_by training: the team whose training holds the headroom (default: "
        "the service's team); another team's training is reclaimed as Kueue reclaims "
        "borrowed quota, so that team should borrow it",
    )
    gang_pods: Count = Field(
        default=1,
        ge=1,
        description="held_by training: pods per training job, placed and stopped together "
        "(a gang); the headroom's pods are rounded up to whole gangs",
    )

    termination_grace_seconds: float | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="held_by training: the training's pods' terminationGracePeriodSeconds: a "
        "stopped job saves its state on SIGTERM (save_seconds) and releases its GPUs when "
        "saved, or at the grace if the save does not fit (its work since the last checkpoint "
        "then lost); a replica on those GPUs starts when they are released. Unset: stopped at "
        "once, the work since the last checkpoint lost",
    )
    save_seconds: float = Field(
        default=30,
        ge=0,
        le=3600,
        description="held_by training, with termination_grace_seconds: how long the job takes "
        "to save its state on SIGTERM",
    )

    @model_validator(mode="after")
    def _training_only(self) -> HeadroomSpec:
        if self.held_by != "training" and (
            self.team is not None
            or self.gang_pods != 1
            or self.termination_grace_seconds is not None
        ):
            raise ValueError(
                "team, gang_pods and termination_grace_seconds are for held_by: training"
            )
        return self

    def release_seconds(self) -> float:
        """How long a stopped training job holds its GPUs: the save, at most the grace (0
        without a grace period)."""
        grace = self.termination_grace_seconds
        return 0.0 if grace is None else min(self.save_seconds, grace)

    def saved_on_stop(self) -> bool:
        """True when a stopped training job saves its state within its grace period (it
        loses no work)."""
        grace = self.termination_grace_seconds
        return grace is not None and self.save_seconds <= grace


class FloorSpec(StrictModel):
    """A scheduled floor (KEDA's cron trigger): at least ``min_replicas`` from each
    ``schedule`` start (cron, in ``timezone``) for ``duration_seconds``."""

    schedule: str = Field(min_length=1)
    duration_seconds: float = Field(gt=0, le=7 * 86_400)
    min_replicas: Count = Field(ge=1)
    timezone: str = Field(default="UTC", description="an IANA time zone (KEDA's timezone)")

    @field_validator("schedule", "timezone")
    @classmethod
    def _cron(cls, value: str, info: ValidationInfo) -> str:
        from fleetshare.autoscaling.cron import is_valid, is_zone

        if info.field_name == "schedule" and not is_valid(value):
            raise ValueError(f"{value!r} is not a valid cron expression")
        if info.field_name == "timezone" and not is_zone(value):
            raise ValueError(f"{value!r} is not an IANA time zone")
        return value


class ForecastSpec(StrictModel):
    """Forecast pre-provisioning: replicas for the rate forecast ``lead_seconds`` ahead
    (default: the service's node launch + image pull + model load, plus one polling
    interval). ``trend``: the rise of the observed rate over the last ``window_seconds``
    counts when it is significant against the rate's own noise over the ``baseline_seconds``
    before (score above ``z``; ``z_off`` once counting) and above ``min_rise``; the forecast
    is then the trend extended over the lead, at most ``max_factor`` times the observed rate
    (inference/forecast.py)."""

    model: Literal["trend", "holt-winters"] = Field(
        default="trend",
        description="trend: the recent trend, when significant (spikes, ramps); holt-winters: "
        "the autoscaler's seasonal forecaster (fleetshare.autoscaling.forecast) on the "
        "traffic's history (daily patterns)",
    )
    lead_seconds: float | None = Field(default=None, gt=0, le=86_400)
    window_seconds: float = Field(default=DEFAULT_TREND.window, gt=0, le=86_400)
    min_rise: float = Field(
        default=DEFAULT_TREND.min_rise,
        ge=0,
        le=100,
        description="a trend counts when it rises more over the window",
    )
    z: float = Field(
        default=DEFAULT_TREND.z, gt=0, le=100, description="significance: robust z-score"
    )
    z_off: float = Field(
        default=DEFAULT_TREND.z_off, ge=0, le=100, description="hysteresis: z once counting"
    )
    baseline_seconds: float = Field(
        default=DEFAULT_TREND.baseline,
        gt=0,
        le=86_400,
        description="the rate's own noise is measured over this",
    )
    min_noise: float = Field(
        default=DEFAULT_TREND.min_noise,
        ge=0,
        le=10,
        description="the noise is taken as at least this (log)",
    )
    max_factor: float = Field(
        default=DEFAULT_TREND.max_factor,
        ge=1,
        le=1000,
        description="the forecast is at most this x the observed rate",
    )
    hold_seconds: float | None = Field(
        default=None,
        ge=0,
        le=86_400,
        description="a forecast made while the trend counts stands this long (default: the lead)",
    )
    refit_every_samples: int = Field(
        default=12, ge=1, le=100_000, description="holt-winters: refit after this many samples"
    )

    @model_validator(mode="after")
    def _hysteresis(self) -> ForecastSpec:
        if self.z_off > self.z:
            raise ValueError(f"z_off ({self.z_off:g}) must not be above z ({self.z:g})")
        return self


class ServiceSpec(StrictModel):
    """A model server: replicas of one pod, scaled from its traffic (``scaler``, or a KEDA
    ScaledObject / HPA manifest in ``manifest``), for a team at a priority class."""

    name: str = Field(min_length=1, max_length=200)
    team: str = Field(min_length=1)
    priority: str | None = None
    replica: ReplicaSpec | None = None
    scaler: ScalerSpec | None = None
    manifest: str | None = Field(
        default=None, min_length=1, description="a YAML file (Deployment + ScaledObject or HPA)"
    )
    capacity_rps: float = Field(gt=0, description="requests per second one replica serves")
    request_seconds: float = Field(default=0.5, gt=0, le=3600, description="for concurrency")
    startup: StartupSpec = Field(default_factory=StartupSpec)
    traffic: TrafficRef
    headroom: HeadroomSpec | None = None
    floors: list[FloorSpec] = Field(default_factory=list)
    forecast: ForecastSpec | None = None
    measure_from_seconds: float = Field(default=0, ge=0)
    serving: ServingSpec | None = Field(
        default=None, description="the request-level serving model (with slo)"
    )
    slo: SloSpec | None = None
    observed_rate: ObservedRateSpec | None = Field(
        default=None,
        description="the scaler reads a Prometheus-style windowed rate (else the true rate)",
    )

    @model_validator(mode="after")
    def _source(self) -> ServiceSpec:
        if self.manifest is None and (self.scaler is None or self.replica is None):
            raise ValueError("give replica and scaler, or a manifest to import them from")
        if self.manifest is not None and (self.scaler is not None or self.replica is not None):
            raise ValueError("give replica and scaler, or a manifest, not both")
        if (self.serving is None) != (self.slo is None):
            raise ValueError("give serving and slo together (the SLO is measured on requests)")
        if self.traffic.requests is not None and self.serving is None:
            raise ValueError("traffic.requests needs serving (how fast a replica serves them)")
        return self
