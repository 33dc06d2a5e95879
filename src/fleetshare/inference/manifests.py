"""KEDA ScaledObjects and autoscaling/v2 HorizontalPodAutoscalers as service scalers.

A YAML text holds a Deployment and the ScaledObject or HPA that scales it (matched by
``scaleTargetRef.name``). The Deployment's pod template is the replica (requests, node
selector, tolerations, affinity, ``priorityClassName``), read as every other manifest is; the
scaler object gives :class:`~fleetshare.inference.spec.ScalerSpec`:

* KEDA: ``minReplicaCount`` (0), ``maxReplicaCount`` (100), ``pollingInterval`` (30),
  ``cooldownPeriod`` (300), ``advanced.horizontalPodAutoscalerConfig.behavior``; each trigger
  with an ``AverageValue`` target (KEDA's default metric type) becomes a trigger, its
  threshold and ``activation...`` threshold read from its metadata; ``cron`` triggers become
  scheduled floors (``start``/``end``/``desiredReplicas``, in their ``timezone``).
* HPA: ``minReplicas`` (1), ``maxReplicas``, ``behavior``, and ``Pods``, ``Object`` or
  ``External`` metrics with an ``AverageValue`` target.

What a metric measures (rps, concurrency, queue or running) is told by the annotation
``fleetshare.io/metric.<trigger name or index>`` on the scaler object, else guessed (never
running, which the annotation alone names, as the guess has always said concurrency): queue
scalers (rabbitmq, aws-sqs-queue, kafka, redis lists...) measure a queue; otherwise a metric
name or Prometheus query mentioning a queue, concurrency (in flight, running) or requests.
Resource (CPU, memory) metrics, ``Value`` and ``Utilization`` targets are refused (the
simulator follows traffic, not CPU); fields that are read but not modelled are noted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import ValidationError

from fleetshare.autoscaling import cron
from fleetshare.inference.spec import (
    FloorSpec,
    Metric,
    ScalerSpec,
    ScalingRules,
    default_scale_down,
    default_scale_up,
)
from fleetshare.manifests.parse import Document
from fleetshare.manifests.pods import PodShape, read_template
from fleetshare.manifests.values import Fields, ManifestError, join
from fleetshare.model.quantity import MILLI, QuantityError, parse_quantity

METRIC_ANNOTATION = "fleetshare.io/metric."

QUEUE_SCALERS = {
    "rabbitmq": "queueLength",
    "aws-sqs-queue": "queueLength",
    "azure-queue": "queueLength",
    "azure-servicebus": "messageCount",
    "gcp-pubsub": "value",
    "kafka": "lagThreshold",
    "redis": "listLength",
    "redis-streams": "pendingEntriesCount",
    "nats-jetstream": "lagThreshold",
}
"""KEDA scalers that measure a queue, with the metadata key of their per-replica target."""

GENERIC_THRESHOLDS = ("threshold", "targetValue", "value", "targetMetricValue")
"""Metadata keys other KEDA scalers (prometheus, metrics-api, datadog...) name the target by."""

_REFERENCE = datetime(2026, 1, 5, tzinfo=UTC)


@dataclass(frozen=True)
class ImportedScaler:
    """A scaler object and the Deployment it scales."""

    name: str
    deployment: str
    pod: PodShape
    scaler: ScalerSpec
    floors: tuple[FloorSpec, ...]
    notes: tuple[str, ...]


def import_scalers(docs: list[Document]) -> list[ImportedScaler]:
    """Every ScaledObject and HPA in ``docs`` with its Deployment."""
    deployments: dict[str, tuple[Fields, dict[str, Any]]] = {}
    scalers: list[tuple[Fields, dict[str, Any], str]] = []
    for doc in docs:
        if doc.data is None:
            continue
        data = Fields(doc.where).mapping(doc.data, "", required=True)
        kind = data.get("kind")
        name = Fields(doc.where).mapping(data.get("metadata"), "metadata").get("name")
        fields = Fields(f"{doc.where} ({kind} {name})")
        if not isinstance(name, str) or not name:
            raise fields.error("metadata.name", "is required")
        if kind == "Deployment":
            deployments[name] = (fields, data)
        elif kind in ("ScaledObject", "HorizontalPodAutoscaler"):
            scalers.append((fields, data, kind))
        else:
            raise fields.error(
                "kind", "expected Deployment, ScaledObject or HorizontalPodAutoscaler"
            )
    if not scalers:
        raise ManifestError(docs[0].where if docs else "manifest", "no ScaledObject or HPA")
    out = []
    for fields, data, kind in scalers:
        spec = fields.mapping(data.get("spec"), "spec", required=True)
        target = _target(fields, spec)
        if target not in deployments:
            raise fields.error(
                "spec.scaleTargetRef.name", f"no Deployment {target!r} in the manifests"
            )
        dep_fields, dep = deployments[target]
        dep_spec = dep_fields.mapping(dep.get("spec"), "spec", required=True)
        pod = read_template(dep_fields, dep_spec.get("template"), "spec.template")
        notes = [f"{dep_fields.where}: {n}" for n in pod.notes]
        if dep_spec.get("replicas") is not None:
            notes.append(f"{dep_fields.where}: spec.replicas: the scaler decides the replicas")
        annotations = fields.strings(
            fields.mapping(data.get("metadata"), "metadata").get("annotations"),
            "metadata.annotations",
        )
        if kind == "ScaledObject":
            scaler, floors, more = _keda(fields, spec, annotations)
        else:
            scaler, floors, more = _hpa(fields, spec, annotations)
        name = fields.mapping(data.get("metadata"), "metadata")["name"]
        out.append(ImportedScaler(name, target, pod, scaler, floors, (*notes, *more)))
    return out


@dataclass(frozen=True)
class ScaledObjectScaler:
    """A ScaledObject read on its own (the operator's view): the Deployment it scales and
    its scaler."""

    deployment: str
    scaler: ScalerSpec
    floors: tuple[FloorSpec, ...]
    notes: tuple[str, ...]


def read_scaled_object(data: Any, where: str) -> ScaledObjectScaler:
    """One KEDA ScaledObject (a parsed object) as its target's name and scaler, read as
    :func:`import_scalers` reads it; raises :class:`ManifestError` naming the field."""
    top = Fields(where).mapping(data, "", required=True)
    meta = Fields(where).mapping(top.get("metadata"), "metadata")
    fields = Fields(f"{where} (ScaledObject {meta.get('name')})")
    if top.get("kind") != "ScaledObject":
        raise fields.error("kind", f"expected ScaledObject, got {top.get('kind')!r}")
    spec = fields.mapping(top.get("spec"), "spec", required=True)
    target = _target(fields, spec)
    annotations = fields.strings(meta.get("annotations"), "metadata.annotations")
    scaler, floors, notes = _keda(fields, spec, annotations)
    return ScaledObjectScaler(target, scaler, floors, tuple(notes))


def _target(fields: Fields, spec: dict[str, Any]) -> str:
    """The name of the Deployment ``spec.scaleTargetRef`` names (no other kind is scaled)."""
    ref = fields.mapping(spec.get("scaleTargetRef"), "spec.scaleTargetRef", required=True)
    target = fields.text(ref.get("name"), "spec.scaleTargetRef.name", required=True)
    ref_kind = fields.text(ref.get("kind"), "spec.scaleTargetRef.kind") or "Deployment"
    if ref_kind != "Deployment":
        raise fields.error(
            "spec.scaleTargetRef.kind", f"only Deployment is supported, got {ref_kind}"
        )
    api = fields.text(ref.get("apiVersion"), "spec.scaleTargetRef.apiVersion") or "apps/v1"
    if api != "apps/v1":
        raise fields.error("spec.scaleTargetRef.apiVersion", f"expected apps/v1, got {api}")
    assert target is not None
    return target


def _number(fields: Fields, value: Any, path: str) -> float:
    """A quantity (``"100"``, ``"500m"``, 2.5) as a number."""
    if value is None or isinstance(value, (dict, list, bool)):
        raise fields.error(path, f"must be a quantity, got {value!r}")
    try:
        return parse_quantity(value if not isinstance(value, str) else value.strip()) / MILLI
    except QuantityError as exc:
        raise fields.error(path, str(exc)) from None


def _guess(text: str) -> Metric | None:
    low = text.lower()
    if "queue" in low or "pending" in low or "waiting" in low or "backlog" in low:
        return "queue"
    if re.search(r"concurren|in_?flight|running|active_requests", low):
        return "concurrency"
    if "request" in low or "rps" in low or "qps" in low:
        return "rps"
    return None


def _metric(fields: Fields, annotations: dict[str, str], key: str, path: str, hint: str) -> Metric:
    told = annotations.get(f"{METRIC_ANNOTATION}{key}")
    if told is not None:
        if told not in get_args(Metric):
            raise fields.error(
                f"metadata.annotations.{METRIC_ANNOTATION}{key}",
                f"must be one of {', '.join(get_args(Metric))}, got {told!r}",
            )
        return told  # type: ignore[return-value]
    guessed = _guess(hint)
    if guessed is None:
        raise fields.error(
            path,
            f"cannot tell whether {hint!r} measures rps, concurrency or queue: annotate the "
            f"object with {METRIC_ANNOTATION}{key}",
        )
    return guessed


def _behavior(fields: Fields, value: Any, path: str) -> dict[str, Any]:
    behavior = fields.mapping(value, path)
    out: dict[str, Any] = {}
    for direction, key in (("scaleUp", "scale_up"), ("scaleDown", "scale_down")):
        if direction not in behavior:
            continue
        rules_path = join(path, direction)
        rules = fields.mapping(behavior[direction], rules_path)
        base = default_scale_up() if key == "scale_up" else default_scale_down()
        policies: list[dict[str, Any]] = base.model_dump()["policies"]
        if "policies" in rules:
            policies = []
            items = fields.items(rules["policies"], join(rules_path, "policies"))
            for i, item in enumerate(items):
                policy_path = join(rules_path, f"policies[{i}]")
                policy = fields.mapping(item, policy_path, required=True)
                policies.append(
                    {
                        "type": policy.get("type"),
                        "value": policy.get("value"),
                        "period_seconds": policy.get("periodSeconds"),
                    }
                )
        data = {
            "stabilization_window_seconds": rules.get(
                "stabilizationWindowSeconds", base.stabilization_window_seconds
            ),
            "policies": policies,
            "select_policy": rules.get("selectPolicy", base.select_policy),
        }
        try:
            out[key] = ScalingRules.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise fields.error(rules_path, f"{where}: {first['msg']}") from None
    return out


def _scaler(fields: Fields, data: dict[str, Any]) -> ScalerSpec:
    try:
        return ScalerSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise fields.error("spec", f"{where}: {first['msg']}") from None


def _keda(
    fields: Fields, spec: dict[str, Any], annotations: dict[str, str]
) -> tuple[ScalerSpec, tuple[FloorSpec, ...], list[str]]:
    notes = []
    if spec.get("initialCooldownPeriod") is not None:
        notes.append(f"{fields.where}: spec.initialCooldownPeriod: not modelled")
    advanced = fields.mapping(spec.get("advanced"), "spec.advanced")
    if advanced.get("scalingModifiers") is not None:
        notes.append(f"{fields.where}: spec.advanced.scalingModifiers: not modelled")
    hpa_config = fields.mapping(
        advanced.get("horizontalPodAutoscalerConfig"), "spec.advanced.horizontalPodAutoscalerConfig"
    )
    behavior = _behavior(
        fields, hpa_config.get("behavior"), "spec.advanced.horizontalPodAutoscalerConfig.behavior"
    )
    triggers = []
    floors = []
    for i, raw in enumerate(fields.items(spec.get("triggers"), "spec.triggers", required=True)):
        path = f"spec.triggers[{i}]"
        trigger = fields.mapping(raw, path, required=True)
        kind = fields.text(trigger.get("type"), join(path, "type"), required=True)
        meta = fields.mapping(trigger.get("metadata"), join(path, "metadata"), required=True)
        metric_type = (
            fields.text(trigger.get("metricType"), join(path, "metricType")) or "AverageValue"
        )
        if kind == "cron":
            floors.append(_cron(fields, meta, join(path, "metadata")))
            continue
        if metric_type != "AverageValue":
            raise fields.error(
                join(path, "metricType"), f"only AverageValue is supported, got {metric_type}"
            )
        key_name = fields.text(trigger.get("name"), join(path, "name")) or str(i)
        assert kind is not None
        if kind in QUEUE_SCALERS:
            threshold_key: str | None = QUEUE_SCALERS[kind]
            metric: Metric = _metric(fields, annotations, key_name, path, "queue")
        else:
            threshold_key = next((k for k in GENERIC_THRESHOLDS if k in meta), None)
            hint = str(meta.get("query") or meta.get("metricName") or kind)
            metric = _metric(fields, annotations, key_name, join(path, "metadata"), hint)
        if threshold_key is None or threshold_key not in meta:
            raise fields.error(
                join(path, "metadata"),
                f"no target: give {threshold_key or ' or '.join(GENERIC_THRESHOLDS)}",
            )
        target = _number(fields, meta[threshold_key], join(join(path, "metadata"), threshold_key))
        activation_key = "activation" + threshold_key[0].upper() + threshold_key[1:]
        activation = 0.0
        if meta.get(activation_key) is not None:
            activation = _number(
                fields, meta[activation_key], join(join(path, "metadata"), activation_key)
            )
        entry: dict[str, Any] = {"metric": metric, "target": target, "activation": activation}
        if kind == "prometheus":
            entry["prometheus"] = _prometheus(fields, meta, join(path, "metadata"), notes)
        triggers.append(entry)
    if not triggers:
        raise fields.error(
            "spec.triggers", "needs a trigger besides cron (the scaler follows traffic)"
        )
    data: dict[str, Any] = {
        "min_replicas": fields.whole(
            spec.get("minReplicaCount"), "spec.minReplicaCount", default=0
        ),
        "max_replicas": fields.whole(
            spec.get("maxReplicaCount"), "spec.maxReplicaCount", default=100, minimum=1
        ),
        "polling_interval_seconds": fields.whole(
            spec.get("pollingInterval"), "spec.pollingInterval", default=30, minimum=1
        ),
        "cooldown_seconds": fields.whole(
            spec.get("cooldownPeriod"), "spec.cooldownPeriod", default=300
        ),
        "triggers": triggers,
        "behavior": behavior,
    }
    if spec.get("idleReplicaCount") is not None:
        data["idle_replicas"] = fields.whole(
            spec.get("idleReplicaCount"), "spec.idleReplicaCount", default=0
        )
    if spec.get("fallback") is not None:
        data["fallback"] = _fallback(fields, spec.get("fallback"), "spec.fallback")
    return _scaler(fields, data), tuple(floors), notes


def _fallback(fields: Fields, value: Any, path: str) -> dict[str, Any]:
    """KEDA's ``fallback`` (``failureThreshold``, ``replicas``, ``behavior``)."""
    raw = fields.mapping(value, path, required=True)
    for key in ("failureThreshold", "replicas"):
        if raw.get(key) is None:
            raise fields.error(join(path, key), "is required")
    out: dict[str, Any] = {
        "failure_threshold": fields.whole(
            raw["failureThreshold"], join(path, "failureThreshold"), default=3, minimum=1
        ),
        "replicas": fields.whole(raw["replicas"], join(path, "replicas"), default=0),
    }
    behavior = fields.text(raw.get("behavior"), join(path, "behavior"))
    if behavior is not None:
        out["behavior"] = behavior
    return out


PROMETHEUS_NOT_MODELLED = (
    "namespace",
    "customHeaders",
    "queryParameters",
    "unsafeSsl",
    "authModes",
    "cortexOrgID",
)
"""KEDA prometheus metadata a live scaler does not send (noted on import)."""


def _prometheus(
    fields: Fields, meta: dict[str, Any], path: str, notes: list[str]
) -> dict[str, Any]:
    """KEDA's prometheus trigger metadata as the trigger's query (``PrometheusQuery``)."""
    server = fields.text(meta.get("serverAddress"), join(path, "serverAddress"), required=True)
    query = fields.text(meta.get("query"), join(path, "query"), required=True)
    ignore = str(meta.get("ignoreNullValues", "true")).strip().lower()
    if ignore not in ("true", "false"):
        raise fields.error(join(path, "ignoreNullValues"), f"true or false, got {ignore!r}")
    if not server or not server.startswith(("http://", "https://")):
        raise fields.error(join(path, "serverAddress"), f"an http(s) URL, got {server!r}")
    for key in PROMETHEUS_NOT_MODELLED:
        if meta.get(key) is not None:
            notes.append(f"{fields.where}: {join(path, key)}: not sent by the live scaler")
    return {"server_address": server, "query": query, "ignore_null_values": ignore == "true"}


def _cron(fields: Fields, meta: dict[str, Any], path: str) -> FloorSpec:
    """KEDA's cron trigger as a floor: from ``start`` until the next ``end``."""
    tz = fields.text(meta.get("timezone"), join(path, "timezone")) or "UTC"
    if not cron.is_zone(tz):
        raise fields.error(join(path, "timezone"), f"not an IANA time zone: {tz!r}")
    start = fields.text(meta.get("start"), join(path, "start"), required=True)
    end = fields.text(meta.get("end"), join(path, "end"), required=True)
    assert start is not None and end is not None
    for key, expression in (("start", start), ("end", end)):
        if not cron.is_valid(expression):
            raise fields.error(join(path, key), f"not a cron expression: {expression!r}")
    opens = cron.next_start(start, 0.0, _REFERENCE, tz)
    closes = cron.next_start(end, opens, _REFERENCE, tz)
    replicas = _number(fields, meta.get("desiredReplicas"), join(path, "desiredReplicas"))
    if replicas < 1 or not replicas.is_integer():
        raise fields.error(
            join(path, "desiredReplicas"), f"must be a whole number >= 1, got {replicas:g}"
        )
    return FloorSpec(
        schedule=start, duration_seconds=closes - opens, min_replicas=int(replicas), timezone=tz
    )


def _hpa(
    fields: Fields, spec: dict[str, Any], annotations: dict[str, str]
) -> tuple[ScalerSpec, tuple[FloorSpec, ...], list[str]]:
    triggers = []
    for i, raw in enumerate(fields.items(spec.get("metrics"), "spec.metrics", required=True)):
        path = f"spec.metrics[{i}]"
        entry = fields.mapping(raw, path, required=True)
        kind = fields.text(entry.get("type"), join(path, "type"), required=True)
        if kind not in ("Pods", "Object", "External"):
            raise fields.error(
                join(path, "type"),
                f"{kind} metrics are not simulated (the simulator follows traffic, not CPU or "
                "memory): use Pods, Object or External",
            )
        assert kind is not None
        body_path = join(path, kind[0].lower() + kind[1:])
        body = fields.mapping(entry.get(kind[0].lower() + kind[1:]), body_path, required=True)
        metric = fields.mapping(body.get("metric"), join(body_path, "metric"), required=True)
        name = fields.text(metric.get("name"), join(body_path, "metric.name"), required=True)
        target = fields.mapping(body.get("target"), join(body_path, "target"), required=True)
        target_type = fields.text(target.get("type"), join(body_path, "target.type"), required=True)
        if target_type != "AverageValue":
            raise fields.error(
                join(body_path, "target.type"), f"only AverageValue is supported, got {target_type}"
            )
        assert name is not None
        kind_of = _metric(fields, annotations, name, join(body_path, "metric.name"), name)
        value = _number(fields, target.get("averageValue"), join(body_path, "target.averageValue"))
        triggers.append({"metric": kind_of, "target": value})
    data: dict[str, Any] = {
        "min_replicas": fields.whole(
            spec.get("minReplicas"), "spec.minReplicas", default=1, minimum=1
        ),
        "max_replicas": fields.whole(
            spec.get("maxReplicas"), "spec.maxReplicas", default=0, minimum=1
        )
        if spec.get("maxReplicas") is not None
        else _missing(fields, "spec.maxReplicas"),
        "cooldown_seconds": 0,
        "triggers": triggers,
        "behavior": _behavior(fields, spec.get("behavior"), "spec.behavior"),
    }
    return _scaler(fields, data), (), []


def _missing(fields: Fields, path: str) -> int:
    raise fields.error(path, "is required")
