"""``sparkoperator.k8s.io/v1beta2`` SparkApplication (Kueue's ``sparkapplication``
integration, alpha there): ``driver``, 1 pod, and ``executor``, ``spec.executor.instances``
pods (default 0). The spark operator does not write pod templates; Spark sizes the pods, and
Kueue mirrors its rules, as done here: CPU ``coreRequest`` (or the ``sparkConf``
``spark.kubernetes.<role>.request.cores``), else ``cores`` (or ``spark.<role>.cores``, default
1); memory ``memory`` (Java format, ``512m``, default ``1g``) plus the overhead
``memoryOverhead``, else ``max(factor x memory, 384Mi)`` (factor:
``spark.<role>.memoryOverheadFactor``, ``spark.kubernetes.memoryOverheadFactor``,
``spec.memoryOverheadFactor``, else 0.4 for Python and R, 0.1 otherwise), and for executors
``spark.executor.pyspark.memory`` (Python) and the off-heap size when enabled; limits
``coreLimit``, ``memoryLimit`` and ``gpu``; the role's ``template``, ``nodeSelector`` (or
``spec.nodeSelector``), ``tolerations``, ``affinity``, ``priorityClassName``,
``initContainers`` and ``sidecars``. Suspended at ``spec.suspend``; finished when its
application state is COMPLETED, FAILED or SUBMISSION_FAILED. Dynamic allocation is refused
(Kueue's webhook refuses it)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fleetshare.manifests.kinds.base import KindPods, Path, RawPodSet, SuspendedKind, spec_of
from fleetshare.manifests.pods import PodShape, read_pod_spec
from fleetshare.manifests.values import Fields, join

ROLES = ("driver", "executor")
CONTAINERS = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}
"""The container Spark sizes, in a pod template that has several."""
APP_LABEL = "sparkoperator.k8s.io/app-name"
ROLE_LABEL = "spark-role"
_MEMORY = re.compile(r"^([0-9]+)([a-z]+)?$")
_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30,
          "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}  # fmt: skip
MIN_OVERHEAD_MIB = 384
DONE = ("COMPLETED", "FAILED", "SUBMISSION_FAILED")


def java_bytes(fields: Fields, text: Any, path: str, unit: int) -> int:
    """A Spark memory string (``512m``, ``2g``; a bare number is in ``unit`` bytes)."""
    match = _MEMORY.match(str(text).strip().lower())
    if match is None or isinstance(text, bool) or match.group(2) not in (None, *_UNITS):
        raise fields.error(path, f"{text!r} is not a Spark memory size (512m, 2g)")
    return int(match.group(1)) * (_UNITS[match.group(2)] if match.group(2) else unit)


class _Role:
    """One role's settings: the typed field, else the ``sparkConf`` property."""

    def __init__(self, fields: Fields, spec: Mapping[str, Any], role: str) -> None:
        self.fields, self.spec, self.role = fields, spec, role
        self.path = join("spec", role)
        self.own = fields.mapping(spec.get(role), self.path, required=role == "driver")
        self.conf = fields.strings(spec.get("sparkConf"), "spec.sparkConf")

    def value(self, key: str, prop: str) -> tuple[Any, str] | None:
        if self.own.get(key) is not None:
            return self.own[key], join(self.path, key)
        if prop in self.conf:
            return self.conf[prop], join("spec.sparkConf", prop)
        return None

    def cpu(self) -> str:
        given = self.value("coreRequest", f"spark.kubernetes.{self.role}.request.cores")
        if given is not None:
            return str(given[0])
        cores = self.value("cores", f"spark.{self.role}.cores")
        if cores is None:
            return "1"
        value, where = cores
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        return str(self.fields.whole(value, where, default=1, minimum=1))

    def memory_mib(self) -> int:
        mib = 1 << 20
        given = self.value("memory", f"spark.{self.role}.memory")
        memory = java_bytes(self.fields, *given, mib) // mib if given else 1024
        overhead = self.value("memoryOverhead", f"spark.{self.role}.memoryOverhead")
        if overhead is not None:
            extra = java_bytes(self.fields, *overhead, mib) // mib
        else:
            extra = max(int(self._factor() * memory), MIN_OVERHEAD_MIB)
        total = memory + extra
        if self.role == "executor":
            python = self.spec.get("type") == "Python"
            pyspark = self.conf.get("spark.executor.pyspark.memory")
            if python and pyspark is not None:
                where = "spec.sparkConf.spark.executor.pyspark.memory"
                total += java_bytes(self.fields, pyspark, where, mib) // mib
            off_heap = self.conf.get("spark.memory.offHeap.size")
            if self.conf.get("spark.memory.offHeap.enabled", "").lower() == "true" and off_heap:
                where = "spec.sparkConf.spark.memory.offHeap.size"
                total += java_bytes(self.fields, off_heap, where, 1) // mib
        return total

    def _factor(self) -> float:
        for prop in (f"spark.{self.role}.memoryOverheadFactor",
                     "spark.kubernetes.memoryOverheadFactor"):  # fmt: skip
            if prop in self.conf:
                return self._number(self.conf[prop], join("spec.sparkConf", prop))
        if self.spec.get("memoryOverheadFactor") not in (None, ""):
            return self._number(self.spec["memoryOverheadFactor"], "spec.memoryOverheadFactor")
        return 0.4 if self.spec.get("type") in ("Python", "R") else 0.1

    def _number(self, text: Any, where: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            value = -1.0
        if value < 0:
            raise self.fields.error(where, f"must be a non-negative number, got {text!r}")
        return value

    def pod_spec(self) -> dict[str, Any]:
        """The pod spec Spark makes for the role, as far as scheduling goes."""
        template = self.fields.mapping(self.own.get("template"), join(self.path, "template"))
        spec = copy.deepcopy(template.get("spec") or {})
        containers = spec.setdefault("containers", [])
        if not containers:
            containers.append({"name": CONTAINERS[self.role]})
        named = [isinstance(c, dict) and c.get("name") == CONTAINERS[self.role]
                 for c in containers]  # fmt: skip
        index = named.index(True) if True in named else 0
        main = containers[index] = dict(containers[index])
        resources = dict(main.get("resources") or {})
        requests = {**(resources.get("requests") or {}),
                    "cpu": self.cpu(), "memory": f"{self.memory_mib()}Mi"}  # fmt: skip
        limits = dict(resources.get("limits") or {})
        for key, resource in (("coreLimit", "cpu"), ("memoryLimit", "memory")):
            if self.own.get(key) is not None:
                limits[resource] = self.own[key]
        gpu = self.fields.mapping(self.own.get("gpu"), join(self.path, "gpu"))
        quantity = gpu.get("quantity")
        if gpu.get("name") and isinstance(quantity, int) and quantity > 0:
            limits[str(gpu["name"])] = quantity
        main["resources"] = {"requests": requests, "limits": limits}
        for key, into in (("initContainers", "initContainers"), ("sidecars", "containers")):
            extra = self.fields.items(self.own.get(key), join(self.path, key))
            spec[into] = [*(spec.get(into) or []), *extra]
        selector = self.spec.get("nodeSelector") or self.own.get("nodeSelector")
        if selector:
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
        if self.own.get("tolerations"):
            spec["tolerations"] = [*(spec.get("tolerations") or []), *self.own["tolerations"]]
        for key in ("affinity", "priorityClassName"):
            if self.own.get(key):
                spec[key] = self.own[key]
        return spec

    def shape(self) -> PodShape:
        return read_pod_spec(self.fields, self.pod_spec(), f"{self.path} (as Spark sizes it)")


class SparkApplication(SuspendedKind):
    kind = "SparkApplication"
    api_versions = ("sparkoperator.k8s.io/v1beta2",)
    plural = "sparkapplications"
    summary = (
        "``driver``: 1; ``executor``: ``executor.instances`` (default 0); each sized as Spark "
        "sizes it (cores, memory plus overhead, GPU)"
    )

    def read(self, fields: Fields, doc: dict[str, Any]) -> KindPods:
        spec = spec_of(fields, doc)
        allocation = fields.mapping(spec.get("dynamicAllocation"), "spec.dynamicAllocation")
        if allocation.get("enabled") is True:
            raise fields.error(
                "spec.dynamicAllocation.enabled",
                "dynamic allocation is not supported (Kueue's webhook refuses it)",
            )
        executor = _Role(fields, spec, "executor")
        instances = fields.whole(
            executor.own.get("instances"), "spec.executor.instances", default=0
        )
        return KindPods((
            RawPodSet("driver", 1, _Role(fields, spec, "driver").shape()),
            RawPodSet("executor", instances, executor.shape()),
        ))  # fmt: skip

    def selector_paths(self, obj: Mapping[str, Any]) -> dict[str, Path]:
        """``spec.nodeSelector`` when given (it stands for both roles), else each role's."""
        spec = obj.get("spec") or {}
        if isinstance(spec.get("nodeSelector"), Mapping):
            return {role: ("spec",) for role in ROLES}
        return {role: ("spec", role) for role in ROLES}

    def finished(self, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
        state = ((obj.get("status") or {}).get("applicationState") or {}).get("state")
        return state in DONE

    def makes(self, obj: Mapping[str, Any]) -> bool:
        """A Spark pod (the executors are owned by the driver pod, not the application)."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return APP_LABEL in labels and labels.get(ROLE_LABEL) in ROLES


SPARKAPPLICATION = SparkApplication()
