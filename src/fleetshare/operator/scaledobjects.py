"""KEDA ScaledObjects scaled by the operator: each one's Deployment follows its Prometheus
triggers, with the rules the simulator and the service use.

A ScaledObject (``keda.sh/v1alpha1``) is read by the same importer a scenario's manifests go
through (:func:`~fleetshare.inference.manifests.read_scaled_object`), and its scaler is a
:class:`~fleetshare.inference.live.LiveScaler`: every ``spec.pollingInterval`` (KEDA's 30 s by
default) it reads the triggers' queries and decides with
:func:`~fleetshare.inference.scaler.decide` (activation and scale to zero, min/max,
stabilisation windows, rate policies). The replicas are written to the Deployment's scale
subresource; the decision goes to an Event (``Scaled``) and the object's status (KEDA's
``Ready`` and ``Active`` conditions, ``lastActiveTime``).

Polls run on a small thread pool, so the reconcile only starts the ones that are due. A
failure (Prometheus unreachable, a bad query, a ScaledObject the importer refuses, a missing
Deployment) is a Warning Event and ``Ready: False``; the replicas stay as they are.

Only ScaledObjects are scaled: an autoscaling/v2 HorizontalPodAutoscaler is kube-controller-
manager's. A ScaledObject whose Deployment is also the target of an HPA (KEDA's own
``keda-hpa-*`` included, where KEDA runs too) is not scaled (``Ready: False``, reason
``TargetHasHPA``), so the two controllers never fight, as KEDA's webhook refuses such a
ScaledObject.

Restart: the scaler starts from the Deployment's current replicas and the ``lastActiveTime``
in the status (the cooldown to zero counts from it; absent, from the first poll). The HPA
part of its memory is lost, as when kube-controller-manager restarts: the stabilisation
windows' earlier proposals and the rate policies' earlier changes, so the first decisions
after a restart are held by neither.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from fleetshare.inference.live import LiveScaler, prometheus_sources
from fleetshare.inference.manifests import read_scaled_object
from fleetshare.inference.prometheus import MetricError
from fleetshare.inference.scaler import Decision, is_active, resumed
from fleetshare.manifests import ManifestError
from fleetshare.operator.events import Events
from fleetshare.operator.kube import Kube, KubeError, Resource
from fleetshare.operator.watch import Key, key_of

log = logging.getLogger("fleetshare.operator")

SCALED_OBJECTS = Resource("ScaledObject", "keda.sh/v1alpha1", "scaledobjects", True)
DEPLOYMENTS = Resource("Deployment", "apps/v1", "deployments", True)
HPAS = Resource("HorizontalPodAutoscaler", "autoscaling/v2", "horizontalpodautoscalers", True)
PAUSED = "autoscaling.keda.sh/paused"
"""KEDA's annotation: ``"true"`` pauses the scaling of the object (its replicas stay)."""


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Outcome:
    """One poll's result, as the status and Events show it."""

    ready: bool
    reason: str
    message: str
    active: bool | None = None
    """None: unknown (the triggers were not read)."""


def conditions(outcome: Outcome, last: list[dict[str, Any]], at: str) -> list[dict[str, Any]]:
    """KEDA's ``Ready`` and ``Active`` conditions for ``outcome`` (a condition's
    ``lastTransitionTime`` moves only when its status does): pure."""
    old = {c.get("type"): c for c in last}
    wanted = [("Ready", "True" if outcome.ready else "False", outcome.reason, outcome.message)]
    if outcome.active is not None:
        active = "True" if outcome.active else "False"
        why = "ScalerActive" if outcome.active else "ScalerNotActive"
        wanted.append(("Active", active, why, outcome.message))
    elif "Active" in old:
        wanted.append(("Active", "Unknown", outcome.reason, outcome.message))
    out = []
    for kind, status, reason, message in wanted:
        before = old.get(kind) or {}
        since = before.get("lastTransitionTime") if before.get("status") == status else None
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message[:2000],
                "lastTransitionTime": since or at,
            }
        )
    return out


@dataclass
class _Tracked:
    """What the operator keeps for one ScaledObject between polls."""

    generation: Any
    scaler: LiveScaler | None
    target: str
    problem: str = ""
    """Why it cannot be scaled (the importer's or the live scaler's refusal)."""
    notes: tuple[str, ...] = ()
    """What the importer read but the operator does not act on (an Event once)."""
    next_poll: float = 0.0
    running: Future[None] | None = None
    started: bool = False
    """Polled once since the operator started (its state rebuilt from the Deployment)."""
    last_warning: str = ""
    last_reason: str = ""
    """The last decision's warning reason (MaxReplicasBelowTraffic, Fallback): an Event when
    it changes, not every poll."""
    last_active: float | None = None
    """When a trigger was last above its activation threshold (``status.lastActiveTime``)."""


class ScaledObjects:
    """The scalers of the watched ScaledObjects (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        events: Events,
        may_act: Callable[[], bool] = lambda: True,
        *,
        workers: int = 4,
        client: httpx.Client | None = None,
    ) -> None:
        self.kube = kube
        self.events = events
        self.may_act = may_act
        self._client = client
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scaler")
        self.tracked: dict[Key, _Tracked] = {}

    @property
    def client(self) -> httpx.Client:
        """The client of the Prometheus queries, made when the first scaler is (its TLS set-up
        takes tens of milliseconds: an operator that never sees a ScaledObject skips it)."""
        if self._client is None:
            self._client = httpx.Client()
        return self._client

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def sync(self, objects: Iterable[dict[str, Any]], now: float) -> float | None:
        """Start the poll of every ScaledObject that is due; when the next one is due."""
        seen = set()
        due: float | None = None
        for obj in objects:
            key = key_of(obj)
            seen.add(key)
            tracked = self.tracked.get(key)
            if tracked is not None and tracked.running and not tracked.running.done():
                continue  # its poll is still out: no new one, no new scaler
            tracked = self._track(key, obj)
            if now >= tracked.next_poll:
                interval = tracked.scaler.spec.polling_interval_seconds if tracked.scaler else 30
                tracked.next_poll = now + interval
                tracked.running = self.pool.submit(self._poll, tracked, obj, now)
            due = tracked.next_poll if due is None else min(due, tracked.next_poll)
        for key in [k for k in self.tracked if k not in seen]:  # deleted: replicas stay
            del self.tracked[key]
        return due

    def _track(self, key: Key, obj: dict[str, Any]) -> _Tracked:
        """The object's scaler, made anew when its spec changed (keeping its memory)."""
        meta = obj.get("metadata") or {}
        generation = (meta.get("generation"), meta.get("uid"))
        tracked = self.tracked.get(key)
        if tracked is not None and tracked.generation == generation:
            return tracked
        where = f"ScaledObject {key[0]}/{key[1]}"
        scaler: LiveScaler | None = None
        target, problem = "", ""
        notes: tuple[str, ...] = ()
        try:
            read = read_scaled_object(obj, where)
            target = read.deployment
            scaler = LiveScaler(
                read.scaler, prometheus_sources(read.scaler, self.client), floors=read.floors
            )
            notes = read.notes
        except (ManifestError, ValueError) as exc:
            problem = str(exc)
        new = _Tracked(generation, scaler, target, problem, notes)
        if tracked is not None:  # the spec changed: the scaler's memory carries over
            if scaler is not None and tracked.scaler is not None:
                scaler.state = tracked.scaler.state
            new.started = tracked.started and tracked.scaler is not None
            new.last_warning, new.last_active = tracked.last_warning, tracked.last_active
            new.last_reason = tracked.last_reason
        self.tracked[key] = new
        return new

    # -- one poll (on the pool) --------------------------------------------------------------

    def _poll(self, tracked: _Tracked, obj: dict[str, Any], now: float) -> None:
        if tracked.notes:
            self.events.post(obj, "Normal", "NotModelled", "; ".join(tracked.notes))
            tracked.notes = ()
        try:
            outcome = self._decide(tracked, obj, now)
        except Exception as exc:  # never let a poll take the operator down
            log.exception("scaling %s failed", key_of(obj))
            outcome = Outcome(False, "ScalerFailed", f"{type(exc).__name__}: {exc}")
        if not outcome.ready and outcome.message != tracked.last_warning:
            self.events.post(obj, "Warning", outcome.reason, outcome.message)
        tracked.last_warning = "" if outcome.ready else outcome.message
        self._write_status(obj, tracked, outcome)

    def _decide(self, tracked: _Tracked, obj: dict[str, Any], now: float) -> Outcome:
        """Read, decide and scale once; what happened."""
        if tracked.scaler is None:
            return Outcome(False, "ScaledObjectInvalid", tracked.problem)
        meta = obj.get("metadata") or {}
        if str((meta.get("annotations") or {}).get(PAUSED, "")).lower() == "true":
            return Outcome(True, "ScalingPaused", f"{PAUSED}: the replicas are left as they are")
        namespace, target = str(meta.get("namespace")), tracked.target
        try:
            scale = self.kube.get(DEPLOYMENTS, target, namespace, sub="scale")
            hpa = self._hpa_on(namespace, target)
        except KubeError as exc:
            reason = "TargetNotFound" if exc.status == 404 else "ScalerFailed"
            return Outcome(False, reason, f"Deployment {namespace}/{target}: {exc}")
        if hpa is not None:
            return Outcome(
                False,
                "TargetHasHPA",
                f"Deployment {target} is scaled by the "
                f"HorizontalPodAutoscaler {hpa}: fleetshare leaves it to it",
            )
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        scaler = tracked.scaler
        if not tracked.started:  # rebuilt from the Deployment and the status
            tracked.last_active = _since((obj.get("status") or {}).get("lastActiveTime"))
            scaler.state = resumed(current, now, last_active=tracked.last_active)
        try:
            decision = scaler.tick(now, current)
        except MetricError as exc:
            return Outcome(False, "ScalerFailed", str(exc))
        tracked.started = True
        active = is_active(scaler.last_readings)
        if active:
            tracked.last_active = now
        if decision.replicas != current:
            self._scale(obj, target, current, decision)
        if decision.reason and decision.reason != tracked.last_reason:
            # max_replicas below the traffic, or the fallback: say so once
            self.events.post(obj, "Warning", decision.reason, decision.why)
        tracked.last_reason = decision.reason
        message = f"{current} -> {decision.replicas}: {decision.why}"
        return Outcome(True, "ScalerReady", message, active)

    def _hpa_on(self, namespace: str, target: str) -> str | None:
        """The name of an HPA scaling Deployment ``target`` (None: none)."""
        hpas, _ = self.kube.list(HPAS, namespace)
        for hpa in hpas:
            ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") == "Deployment" and ref.get("name") == target:
                return str(hpa["metadata"]["name"])
        return None

    def _scale(self, obj: dict[str, Any], target: str, current: int, decision: Decision) -> None:
        namespace = str((obj.get("metadata") or {}).get("namespace"))
        if not self.may_act():
            return
        self.kube.patch(
            DEPLOYMENTS, target, {"spec": {"replicas": decision.replicas}}, namespace, sub="scale"
        )
        self.events.post(
            obj,
            "Normal",
            "Scaled",
            f"Deployment {target} scaled from {current} to {decision.replicas}: {decision.why}",
        )

    def _write_status(self, obj: dict[str, Any], tracked: _Tracked, outcome: Outcome) -> None:
        old = obj.get("status") or {}
        status: dict[str, Any] = {
            "conditions": conditions(outcome, old.get("conditions") or [], _rfc3339(time.time())),
            "scaleTargetKind": "apps/v1.Deployment",
        }
        if tracked.last_active is not None:
            status["lastActiveTime"] = _rfc3339(tracked.last_active)
        same = [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in status["conditions"]
        ]
        was = [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in old.get("conditions") or ()
        ]
        if same == was and old.get("lastActiveTime") == status.get("lastActiveTime"):
            return
        if not self.may_act():
            return
        meta = obj.get("metadata") or {}
        try:
            self.kube.patch(
                SCALED_OBJECTS,
                str(meta.get("name")),
                {"status": status},
                str(meta.get("namespace")),
                sub="status",
            )
        except KubeError as exc:
            log.debug("ScaledObject status not written: %s", exc)
