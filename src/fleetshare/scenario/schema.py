"""The scenario file format (YAML), validated with pydantic."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, StrictInt, model_validator

from fleetshare.autoscaling.nodepool import NodePool, unknown_zones
from fleetshare.autoscaling.settings import AutoscalerSpec, CloudSpec, DoNotDisruptSpec, PdbSpec
from fleetshare.inference.spec import ServiceSpec
from fleetshare.inputs import MAX_TOTAL_NODES, MAX_TOTAL_PODS, Count, Name, StrictModel
from fleetshare.model.quantity import Quantities
from fleetshare.policy.reading import DEFAULT_READING, BorrowLimitReading

Quantity = str | int | float


class _Strict(StrictModel):
    pass


class TaintSpec(_Strict):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class TolerationSpec(_Strict):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""


class NodeSelectorRequirementSpec(_Strict):
    """One ``matchExpressions`` entry of a required node affinity term (Kubernetes' rules)."""

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values(self) -> NodeSelectorRequirementSpec:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        integer = len(self.values) == 1 and self.values[0].lstrip("-").isdigit()
        if self.operator in ("Gt", "Lt") and not integer:
            raise ValueError(f"operator {self.operator} needs exactly one integer value")
        return self


NodeAffinitySpec = list[list[NodeSelectorRequirementSpec]]
"""Required node affinity: terms ORed, each a list of requirements ANDed."""


class MigDevicesSpec(_Strict):
    """GPUs of one node configured alike, as an entry of NVIDIA mig-parted's ``mig-configs``:
    ``{devices: [6, 7], mig-enabled: true, mig-devices: {1g.5gb: 7}}``."""

    devices: list[Annotated[int, Field(ge=0)]] | Literal["all"]
    mig_enabled: bool = Field(validation_alias=AliasChoices("mig-enabled", "mig_enabled"))
    mig_devices: dict[str, StrictInt] = Field(
        default_factory=dict, validation_alias=AliasChoices("mig-devices", "mig_devices")
    )

    @model_validator(mode="after")
    def _consistent(self) -> MigDevicesSpec:
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices given with mig-enabled: false")
        if self.mig_enabled and not self.mig_devices:
            raise ValueError("mig-enabled: true needs mig-devices (slices per profile)")
        return self


class MigSpec(_Strict):
    """The node's MIG partitioning: ``profile`` cuts every GPU into as many slices of it as
    fit; ``layout`` configures GPUs one by one (mig-parted's format; GPUs it does not name
    stay whole)."""

    profile: str | None = None
    layout: list[MigDevicesSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one(self) -> MigSpec:
        if (self.profile is None) == (not self.layout):
            raise ValueError("give profile (every GPU alike) or layout (per GPU), not both")
        return self


class NodeSpec(_Strict):
    """Nodes of one kind: an instance type from the catalog and/or explicit allocatable."""

    name: Name | None = None
    instance_type: str | None = None
    count: Count = Field(default=1, ge=1)
    allocatable: Quantities = Field(default_factory=dict)
    zone: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    capacity_type: str = "on-demand"
    mig: MigSpec | None = None

    @model_validator(mode="after")
    def _something(self) -> NodeSpec:
        if self.instance_type is None and not self.allocatable:
            raise ValueError("give instance_type or allocatable")
        if self.instance_type is None and self.name is None:
            raise ValueError("nodes without an instance_type need a name")
        return self


class NodeEvent(_Strict):
    """Something that happens to nodes at a time: cordon, uncordon, fail (NotReady),
    gpu-unhealthy (a failed GPU health check), recover, remove, add."""

    at: float = Field(ge=0)
    action: Literal["cordon", "uncordon", "fail", "gpu-unhealthy", "recover", "remove", "add"]
    nodes: list[str] = Field(default_factory=list)
    add: NodeSpec | None = None

    @model_validator(mode="after")
    def _target(self) -> NodeEvent:
        if self.action == "add" and self.add is None:
            raise ValueError("action add needs 'add: {node spec}'")
        if self.action != "add" and not self.nodes:
            raise ValueError(f"action {self.action} needs 'nodes: [names]'")
        return self


class NamespaceSpec(_Strict):
    """A namespace and its labels (what namespace selectors match; every namespace also
    carries ``kubernetes.io/metadata.name``: its name)."""

    name: Name
    labels: dict[str, str] = Field(default_factory=dict)


class ClusterSpec(_Strict):
    nodes: list[NodeSpec] = Field(default_factory=list)
    events: list[NodeEvent] = Field(default_factory=list)
    namespaces: list[NamespaceSpec] = Field(
        default_factory=list,
        description="namespaces with labels (a namespace not listed has only its name label)",
    )

    @model_validator(mode="after")
    def _unique_namespaces(self) -> ClusterSpec:
        names = [n.name for n in self.namespaces]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"namespace names must be unique; repeated: {', '.join(dupes)}")
        return self


class _Topology(_Strict):
    """A topology level (a node label: ``kubernetes.io/hostname``, a network block such as
    ``topology.k8s.aws/network-node-layer-3``, ``topology.kubernetes.io/zone``) the pods of a
    pod set must share (``required_topology``) or would like to (``preferred_topology``)."""

    required_topology: str | None = Field(default=None, min_length=1, max_length=317)
    preferred_topology: str | None = Field(default=None, min_length=1, max_length=317)

    @model_validator(mode="after")
    def _one_level(self) -> Any:
        if self.required_topology is not None and self.preferred_topology is not None:
            raise ValueError("give required_topology or preferred_topology, not both")
        return self


class PodSetSpec(_Topology):
    name: Name = "main"
    count: Count = Field(default=1, ge=1)
    min_count: Count | None = Field(
        default=None,
        ge=1,
        description="partial admission: when count pods do not fit, as few as this may run "
        "(Kueue's minCount)",
    )
    requests: Quantities
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    node_affinity: NodeAffinitySpec = Field(default_factory=list)

    @model_validator(mode="after")
    def _min(self) -> PodSetSpec:
        if self.min_count is not None and self.min_count > self.count:
            raise ValueError(f"min_count {self.min_count} is more than count {self.count}")
        return self


class WorkloadSpec(_Topology):
    """A job. Either ``pods`` + ``requests`` (one pod set) or a list of ``podsets``."""

    name: Name
    team: Name = Field(validation_alias=AliasChoices("team", "queue"))
    priority: str | None = None
    submit_at: float = Field(default=0, ge=0, validation_alias=AliasChoices("submit_at", "at"))
    duration: float | None = Field(default=None, gt=0)
    pods: Count = Field(default=1, ge=1)
    min_pods: Count | None = Field(
        default=None,
        ge=1,
        description="partial admission: when pods do not fit, as few as this may run "
        "(Kueue's minCount; a Job's kueue.x-k8s.io/job-min-parallelism)",
    )
    requests: Quantities = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    node_affinity: NodeAffinitySpec = Field(default_factory=list)
    podsets: list[PodSetSpec] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)

    def pod_count(self) -> int:
        """Pods of the workload: ``pods``, or the pod sets' counts."""
        return sum(ps.count for ps in self.podsets) if self.podsets else self.pods

    @model_validator(mode="after")
    def _shape(self) -> WorkloadSpec:
        if self.podsets and (self.required_topology or self.preferred_topology):
            raise ValueError("with podsets, give each pod set its topology")
        if self.podsets and self.requests:
            raise ValueError("give either requests (one pod set) or podsets, not both")
        if not self.podsets and not self.requests:
            raise ValueError("give requests or podsets")
        if self.podsets and self.min_pods is not None:
            raise ValueError("with podsets, give each pod set its min_count")
        if self.min_pods is not None and self.min_pods > self.pods:
            raise ValueError(f"min_pods {self.min_pods} is more than pods {self.pods}")
        return self


class ManifestDefaultsSpec(_Strict):
    """For manifests that do not say: the queue (a team, ``namespace/name`` of a LocalQueue,
    or a LocalQueue name only one team has), the run time in seconds, the submit time."""

    queue: str | None = Field(default=None, min_length=1)
    duration: float | None = Field(default=None, gt=0)
    submit_at: float = Field(default=0, ge=0, validation_alias=AliasChoices("submit_at", "at"))


class ManifestEntrySpec(_Strict):
    """A ``manifests:`` entry with settings: a ``file`` (relative to the scenario, one or many
    YAML documents) or a ``manifest`` (an object, or YAML text), and defaults for its objects
    that override ``manifest_defaults`` (an object's own label or annotation wins over both)."""

    file: str | None = Field(default=None, min_length=1)
    manifest: dict[str, Any] | str | None = None
    queue: str | None = Field(default=None, min_length=1)
    duration: float | None = Field(default=None, gt=0)
    submit_at: float | None = Field(
        default=None, ge=0, validation_alias=AliasChoices("submit_at", "at")
    )

    @model_validator(mode="after")
    def _one_source(self) -> ManifestEntrySpec:
        if (self.file is None) == (self.manifest is None):
            raise ValueError("give exactly one of file, manifest")
        return self


class PolicyChange(_Strict):
    """At ``at``, replace the policy: quotas, limits, settings, in fleetshare's format
    (``policy``), as Kueue YAML (``kueue``) or as HyperPod JSON (``hyperpod``), as the
    scenario's own policy may be given."""

    at: float = Field(ge=0)
    policy: dict[str, Any] | None = None
    kueue: str | list[dict[str, Any]] | None = None
    hyperpod: str | dict[str, Any] | list[Any] | None = None

    @model_validator(mode="after")
    def _one_format(self) -> PolicyChange:
        given = [f for f in ("policy", "kueue", "hyperpod") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of policy, kueue or hyperpod")
        return self


class ScenarioSpec(_Strict):
    """A whole scenario file."""

    name: str = "scenario"
    description: str = ""
    cluster: ClusterSpec
    policy: dict[str, Any] | None = None
    kueue: str | list[dict[str, Any]] | None = None
    hyperpod: str | dict[str, Any] | list[Any] | None = None
    hyperpod_borrow_limit: BorrowLimitReading = DEFAULT_READING
    policy_overrides: dict[str, Any] = Field(default_factory=dict)
    policy_changes: list[PolicyChange] = Field(default_factory=list)
    prometheus_servers: dict[Name, Annotated[str, Field(pattern=r"^https?://\S+$")]] = Field(
        default_factory=dict,
        description="for fleetshare serve: the Prometheus servers live services may query, "
        "by name (http(s) URLs the admin chooses); a service's trigger names one, and the "
        "server fetches no other address",
    )
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    manifests: list[str | dict[str, Any]] = Field(
        default_factory=list,
        description="Kubernetes workload manifests (Job, PyTorchJob, JobSet, RayCluster, "
        "RayJob, Pod groups): inline objects, file names relative to the scenario, YAML text, "
        "or {file|manifest, queue, duration, submit_at}",
    )
    manifest_defaults: ManifestDefaultsSpec = Field(default_factory=ManifestDefaultsSpec)
    node_pools: list[NodePool] = Field(
        default_factory=list, description="with pools, the autoscaler launches and removes nodes"
    )
    cloud: CloudSpec = Field(default_factory=CloudSpec)
    autoscaler: AutoscalerSpec = Field(default_factory=AutoscalerSpec)
    pdbs: list[PdbSpec] = Field(
        default_factory=list, description="PodDisruptionBudgets over workloads (by name or label)"
    )
    do_not_disrupt: DoNotDisruptSpec = Field(
        default_factory=DoNotDisruptSpec,
        description="karpenter.sh/do-not-disrupt on pools, nodes or workloads",
    )
    services: list[ServiceSpec] = Field(
        default_factory=list,
        description="inference services: replicas scaled from traffic (see docs/inference.md)",
    )
    until: float | None = Field(default=None, ge=0)
    expect: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_policy(self) -> ScenarioSpec:
        given = [k for k in ("policy", "kueue", "hyperpod") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of policy, kueue, hyperpod")
        names = [w.name for w in self.workloads]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"workload names must be unique; repeated: {', '.join(dupes)}")
        services = [s.name for s in self.services]
        dupes = sorted({n for n in services if services.count(n) > 1})
        if dupes:
            raise ValueError(f"service names must be unique; repeated: {', '.join(dupes)}")
        pools = [p.name for p in self.node_pools]
        dupes = sorted({n for n in pools if pools.count(n) > 1})
        if dupes:
            raise ValueError(f"node pool names must be unique; repeated: {', '.join(dupes)}")
        pdbs = [p.name for p in self.pdbs]
        dupes = sorted({n for n in pdbs if pdbs.count(n) > 1})
        if dupes:
            raise ValueError(f"pdb names must be unique; repeated: {', '.join(dupes)}")
        named = set(names)
        for pdb in self.pdbs if not self.manifests else ():  # with manifests: at load time
            unknown = sorted(set(pdb.workloads) - named)
            if unknown:
                raise ValueError(f"pdb {pdb.name} names unknown workloads {unknown}")
        unknown_pools = sorted(set(self.do_not_disrupt.pools) - set(pools))
        if unknown_pools:
            raise ValueError(f"do_not_disrupt names unknown node pools {unknown_pools}")
        nodes = sum(n.count for n in self.cluster.nodes) + sum(
            e.add.count for e in self.cluster.events if e.add is not None
        )
        if nodes > MAX_TOTAL_NODES:
            raise ValueError(
                f"cluster: {nodes:,} nodes in all; at most {MAX_TOTAL_NODES:,} are simulated"
            )
        pods = sum(w.pod_count() for w in self.workloads)
        if pods > MAX_TOTAL_PODS:
            raise ValueError(
                f"workloads: {pods:,} pods in all; at most {MAX_TOTAL_PODS:,} are simulated"
            )
        zones = set(self.cloud.zones)
        for pool in self.node_pools:
            unknown = unknown_zones(pool, zones)
            if unknown:
                raise ValueError(
                    f"node pool {pool.name} names zones {unknown} the cloud does not have "
                    f"(cloud.zones: {sorted(zones)})"
                )
        return self
