"""AWS adapters for the cloud-provider interface: EC2 fleets and SageMaker HyperPod.

Both take a boto3 client (so tests pass a stubbed one) and never create sessions themselves.
Each API call is split into a pure request builder, the client call, and a pure response parser,
so the mapping to and from AWS shapes is testable without a client.

:class:`Ec2FleetProvider`
    ``launch`` -> ``CreateFleet`` (``Type="instant"``, one launch-template config with one
    ``{InstanceType, AvailabilityZone}`` override, instances tagged with the cluster and pool);
    ``terminate`` -> ``TerminateInstances``; ``instances`` -> ``DescribeInstances`` filtered on
    the cluster tag (paginated). ``offerings``: on-demand prices come from ``pricing`` (a
    ``{type: USD/hour}`` mapping or a :class:`~fleetshare.model.catalog.Catalog`, default the
    packaged catalog); spot prices, when ``spot_prices=True`` (the default), from
    ``DescribeSpotPriceHistory`` (``Linux/UNIX``, the newest price per type and zone); zones
    from ``DescribeAvailabilityZones`` unless given. Reserved capacity is not offered.

:class:`HyperPodProvider`
    ``launch`` -> ``BatchAddClusterNodes`` (``IncrementTargetCountBy`` on the instance group of
    the type; at most 50 nodes per call); ``terminate`` -> ``BatchDeleteClusterNodes``;
    ``instances`` -> ``ListClusterNodes`` with ``IncludeNodeLogicalIds`` (paginated). Nodes are
    identified by their ``NodeLogicalId`` (returned at once by BatchAddClusterNodes) and, for
    nodes without one, by their EC2 instance id. HyperPod is on-demand only and each instance
    group lives in one zone, so ``offerings`` gives one on-demand offering per mapped type.
    The service model lists no capacity error code for BatchAddClusterNodes (shortages usually
    surface later as nodes in ``Failure``); ``Failed`` entries with a capacity code or a
    message saying "insufficient capacity" are still mapped to
    :class:`~fleetshare.autoscaling.cloud.InsufficientCapacityError`.

AWS errors raised by the client (``ClientError`` and other botocore errors) become
:class:`~fleetshare.autoscaling.cloud.CloudError` naming the operation, code and message;
capacity codes from CreateFleet become ``InsufficientCapacityError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fleetshare.autoscaling.cloud import (
    AccountLimitError,
    CapacityType,
    CloudError,
    CloudTraits,
    Instance,
    InstanceState,
    InsufficientCapacityError,
    LaunchRequest,
    Offering,
    UnavailableOfferings,
)
from fleetshare.model.catalog import Catalog, UnknownInstanceTypeError, load_catalog

CLUSTER_TAG_KEY = "fleetshare.io/cluster"
POOL_TAG_KEY = "fleetshare.io/pool"
SPOT_PRODUCT = "Linux/UNIX"
LIVE_EC2_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")

CAPACITY_ERROR_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "ReservationCapacityExceeded",
        # A quota, not a shortage, but retrying the same spot offering will not help either.
        "MaxSpotInstanceCountExceeded",
    }
)
"""Error codes that mean "no capacity for this offering right now"."""

ACCOUNT_LIMIT_CODES = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded"})
"""Error codes that mean "the account's service quota or per-type limit is reached"."""

HYPERPOD_MAX_NODES_PER_CALL = 50
HYPERPOD_MAX_IDS_PER_DELETE = 50
EC2_MAX_IDS_PER_TERMINATE = 1000

_EC2_STATES: dict[str, InstanceState] = {
    "pending": "pending",
    "running": "running",
    "shutting-down": "terminating",
    "stopping": "terminating",
    "stopped": "terminating",
    "terminated": "terminated",
}
_HYPERPOD_STATES: dict[str, InstanceState] = {
    "Pending": "pending",
    "AttachInProgress": "pending",
    "DeepHealthCheckInProgress": "pending",
    "Running": "running",
    "SystemUpdating": "running",
    "ShuttingDown": "terminating",
    "DetachInProgress": "terminating",
    "Failure": "terminated",
    "NotFound": "terminated",
}
_EC2_INSTANCE_ID = re.compile(r"^i-[a-f0-9]{8}(?:[a-f0-9]{9})?$")

Pricing = Mapping[str, float] | Catalog
"""On-demand USD/hour by instance type (EC2 or ``ml.`` names), or a catalog."""


# -- shared helpers ---------------------------------------------------------------------------


def on_demand_price(pricing: Pricing, instance_type: str) -> float | None:
    """The on-demand USD/hour of ``instance_type`` in ``pricing`` (``None`` when unknown)."""
    if isinstance(pricing, Catalog):
        try:
            return pricing.get(instance_type).price_per_hour
        except UnknownInstanceTypeError:
            return None
    name = Catalog.ec2_name(instance_type)
    for key, price in pricing.items():
        if Catalog.ec2_name(key) == name:
            return float(price)
    return None


def is_capacity_error(code: str, message: str = "") -> bool:
    """Whether an AWS error code (or, failing that, its message) means a capacity shortage."""
    return code in CAPACITY_ERROR_CODES or "insufficient capacity" in message.lower()


def aws_error(exc: BaseException) -> tuple[str, str] | None:
    """``(code, message)`` of a botocore ``ClientError`` (duck-typed), else ``None``."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error")
        if isinstance(error, Mapping):
            return str(error.get("Code", "")), str(error.get("Message", ""))
    return None


def _call(
    method: Callable[..., Any],
    operation: str,
    /,
    *,
    capacity_for: LaunchRequest | None = None,
    **params: Any,
) -> Mapping[str, Any]:
    """Call a boto3 client method, turning AWS errors into :class:`CloudError`."""
    try:
        response = method(**params)
    except AssertionError:
        raise  # botocore's Stubber reports unexpected calls this way: let tests see them
    except Exception as exc:
        error = aws_error(exc)
        if error is None:
            # Connection, credential and other botocore failures are cloud errors; a request
            # that does not match the service model is a bug and propagates.
            name = type(exc).__name__
            if type(exc).__module__.startswith("botocore") and name != "ParamValidationError":
                raise CloudError(f"{operation}: {exc}") from exc
            raise
        code, message = error
        if code in ACCOUNT_LIMIT_CODES:
            raise AccountLimitError(code, message) from exc
        if capacity_for is not None and is_capacity_error(code, message):
            raise InsufficientCapacityError(
                capacity_for, _capacity_message(capacity_for, code, message)
            ) from exc
        raise CloudError(f"{operation}: {code}: {message}") from exc
    if not isinstance(response, Mapping):
        raise CloudError(f"{operation}: unexpected response {response!r}")
    return response


def _capacity_message(request: LaunchRequest, code: str, message: str) -> str:
    return (
        f"insufficient capacity for {request.instance_type} ({request.capacity_type}) "
        f"in {request.zone}: {code}: {message}"
    ).rstrip(": ")


def _paginate(
    method: Callable[..., Any], operation: str, params: Mapping[str, Any]
) -> Iterator[Mapping[str, Any]]:
    """Pages of a NextToken-paginated operation."""
    token: str | None = None
    while True:
        request: dict[str, Any] = {**params, "NextToken": token} if token else dict(params)
        page = _call(method, operation, **request)
        yield page
        token = page.get("NextToken") or None
        if token is None:
            return


def _timestamp(value: object) -> float:
    """Epoch seconds of a botocore timestamp (``datetime``), 0.0 when absent."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return 0.0


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- EC2: requests and responses ---------------------------------------------------------------


def build_create_fleet_request(
    request: LaunchRequest,
    launch_template_id: str,
    cluster_tag: str,
    launch_template_version: str = "$Latest",
) -> dict[str, Any]:
    """CreateFleet parameters for an instant fleet of one offering."""
    if request.capacity_type == "reserved":
        raise CloudError("Ec2FleetProvider launches on-demand or spot capacity, not reserved")
    return {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": launch_template_id,
                    "Version": launch_template_version,
                },
                "Overrides": [
                    {
                        "InstanceType": Catalog.ec2_name(request.instance_type),
                        "AvailabilityZone": request.zone,
                    }
                ],
            }
        ],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": request.count,
            "DefaultTargetCapacityType": request.capacity_type,
        },
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": CLUSTER_TAG_KEY, "Value": cluster_tag},
                    {"Key": POOL_TAG_KEY, "Value": request.pool},
                ],
            }
        ],
    }


def parse_create_fleet_response(
    response: Mapping[str, Any],
    request: LaunchRequest,
    now: float,
    price_of: Callable[[str, str, CapacityType], float],
) -> list[Instance]:
    """Instances launched by an instant fleet.

    With no instance launched, capacity errors raise :class:`InsufficientCapacityError` and
    other errors :class:`CloudError`; with some launched, errors are ignored (partial launch).
    """
    launched: list[Instance] = []
    for entry in response.get("Instances", []):
        overrides = entry.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
        zone = overrides.get("AvailabilityZone") or request.zone
        capacity_type: CapacityType = (
            "spot" if entry.get("Lifecycle") == "spot" else request.capacity_type
        )
        price = price_of(request.instance_type, zone, capacity_type)
        for instance_id in entry.get("InstanceIds", []):
            launched.append(
                Instance(
                    id=instance_id,
                    instance_type=request.instance_type,
                    zone=zone,
                    capacity_type=capacity_type,
                    price_per_hour=price,
                    pool=request.pool,
                    state="pending",
                    launched_at=now,
                )
            )
    if launched:
        return launched
    errors = [
        (str(e.get("ErrorCode", "")), str(e.get("ErrorMessage", "")))
        for e in response.get("Errors", [])
    ]
    for code, message in errors:
        if code in ACCOUNT_LIMIT_CODES:
            raise AccountLimitError(code, message)
        if is_capacity_error(code, message):
            raise InsufficientCapacityError(request, _capacity_message(request, code, message))
    if errors:
        raise CloudError(
            "CreateFleet launched nothing: " + "; ".join(f"{c}: {m}" for c, m in errors)
        )
    raise CloudError("CreateFleet launched nothing and reported no error")


def build_describe_instances_filters(cluster_tag: str) -> list[dict[str, Any]]:
    """DescribeInstances filters: this cluster's instances that are not terminated."""
    return [
        {"Name": f"tag:{CLUSTER_TAG_KEY}", "Values": [cluster_tag]},
        {"Name": "instance-state-name", "Values": list(LIVE_EC2_STATES)},
    ]


def parse_ec2_instance(
    data: Mapping[str, Any], price_of: Callable[[str, str, CapacityType], float]
) -> Instance:
    """One ``Reservations[].Instances[]`` entry of DescribeInstances as an :class:`Instance`."""
    tags = {t.get("Key"): t.get("Value", "") for t in data.get("Tags", [])}
    lifecycle = data.get("InstanceLifecycle")
    capacity_type: CapacityType
    if lifecycle == "spot":
        capacity_type = "spot"
    elif lifecycle == "capacity-block" or data.get("CapacityReservationId"):
        capacity_type = "reserved"
    else:
        capacity_type = "on-demand"
    instance_type = str(data.get("InstanceType", ""))
    zone = str(data.get("Placement", {}).get("AvailabilityZone", ""))
    state_name = str(data.get("State", {}).get("Name", ""))
    return Instance(
        id=str(data["InstanceId"]),
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        price_per_hour=price_of(instance_type, zone, capacity_type),
        pool=str(tags.get(POOL_TAG_KEY, "")),
        state=_EC2_STATES.get(state_name, "pending"),
        launched_at=_timestamp(data.get("LaunchTime")),
    )


def parse_spot_price_history(pages: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """The newest spot price per (instance type, zone) in DescribeSpotPriceHistory pages."""
    newest: dict[tuple[str, str], tuple[float, float]] = {}
    for page in pages:
        for entry in page.get("SpotPriceHistory", []):
            key = (str(entry.get("InstanceType", "")), str(entry.get("AvailabilityZone", "")))
            when = _timestamp(entry.get("Timestamp"))
            if key not in newest or when >= newest[key][0]:
                newest[key] = (when, float(entry["SpotPrice"]))
    return {key: price for key, (_, price) in newest.items()}


class Ec2FleetProvider:
    """Cloud provider on plain EC2: instant fleets from a launch template.

    ``cluster_tag`` is the value of the ``fleetshare.io/cluster`` tag put on every launched
    instance (``fleetshare.io/pool`` carries the pool); ``instances()`` lists by that tag.
    Launched instances have ``ready_at=None``: readiness is the node joining the cluster.
    Spot instances are priced at the last spot price seen by :meth:`offerings` (else at the
    on-demand price); types without a known on-demand price are priced 0.
    """

    def __init__(
        self,
        ec2_client: Any,
        launch_template_id: str,
        cluster_tag: str,
        pricing: Pricing | None = None,
        *,
        zones: Sequence[str] | None = None,
        spot_prices: bool = True,
        launch_template_version: str = "$Latest",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        traits: CloudTraits | None = None,
    ) -> None:
        self.traits = traits or CloudTraits()
        self._notices: dict[str, float] = {}
        self._unavailable = UnavailableOfferings(self.traits.ice_cooldown_seconds)
        self._ec2 = ec2_client
        self.launch_template_id = launch_template_id
        self.cluster_tag = cluster_tag
        self._pricing: Pricing = pricing if pricing is not None else load_catalog()
        self._zones: list[str] | None = list(zones) if zones is not None else None
        self._spot_prices = spot_prices
        self._launch_template_version = launch_template_version
        self._clock = clock
        self._spot_cache: dict[tuple[str, str], float] = {}

    def zones(self) -> list[str]:
        """Availability zones in use (from DescribeAvailabilityZones once, unless given)."""
        if self._zones is None:
            response = _call(
                self._ec2.describe_availability_zones,
                "DescribeAvailabilityZones",
                Filters=[
                    {"Name": "zone-type", "Values": ["availability-zone"]},
                    {"Name": "state", "Values": ["available"]},
                ],
            )
            self._zones = sorted(str(z["ZoneName"]) for z in response.get("AvailabilityZones", []))
        return list(self._zones)

    def _price(self, instance_type: str, zone: str, capacity_type: CapacityType) -> float:
        if capacity_type == "spot":
            spot = self._spot_cache.get((Catalog.ec2_name(instance_type), zone))
            if spot is not None:
                return spot
        if capacity_type == "reserved":
            return 0.0  # marginal: the reservation is paid for whether used or not
        return on_demand_price(self._pricing, instance_type) or 0.0

    def offerings(self, instance_types: Iterable[str], now: float = 0.0) -> list[Offering]:
        """On-demand offerings in every zone for priced types, plus spot offerings where
        DescribeSpotPriceHistory has a price (when ``spot_prices`` is on)."""
        types = list(dict.fromkeys(instance_types))
        zones = self.zones()
        if self._spot_prices and types:
            pages = _paginate(
                self._ec2.describe_spot_price_history,
                "DescribeSpotPriceHistory",
                {
                    "InstanceTypes": [Catalog.ec2_name(t) for t in types],
                    "ProductDescriptions": [SPOT_PRODUCT],
                    "StartTime": self._clock(),
                },
            )
            self._spot_cache.update(parse_spot_price_history(pages))
        result: list[Offering] = []
        for instance_type in types:
            od = on_demand_price(self._pricing, instance_type)
            for zone in zones:
                spot = self._spot_cache.get((Catalog.ec2_name(instance_type), zone))
                if self._spot_prices and spot is not None:
                    ok = self._unavailable.available(instance_type, zone, "spot", now)
                    result.append(Offering(instance_type, zone, "spot", spot, ok))
                if od is not None:
                    ok = self._unavailable.available(instance_type, zone, "on-demand", now)
                    result.append(Offering(instance_type, zone, "on-demand", od, ok))
        return result

    def launch(self, request: LaunchRequest, now: float) -> list[Instance]:
        """Launch through an instant fleet; may return fewer instances than asked."""
        params = build_create_fleet_request(
            request, self.launch_template_id, self.cluster_tag, self._launch_template_version
        )
        try:
            response = _call(self._ec2.create_fleet, "CreateFleet", capacity_for=request, **params)
            launched = parse_create_fleet_response(response, request, now, self._price)
        except InsufficientCapacityError:
            self._unavailable.mark(request.instance_type, request.zone, request.capacity_type, now)
            raise
        if len(launched) < request.count:  # a partial launch: the offering ran short
            self._unavailable.mark(request.instance_type, request.zone, request.capacity_type, now)
        return launched

    def terminate(self, instance_ids: Sequence[str], now: float) -> None:
        """TerminateInstances (unknown ids fail with EC2's ``InvalidInstanceID.NotFound``)."""
        for chunk in _chunks(list(instance_ids), EC2_MAX_IDS_PER_TERMINATE):
            _call(self._ec2.terminate_instances, "TerminateInstances", InstanceIds=list(chunk))

    def notice_interruption(self, instance_id: str, at: float) -> None:
        """Record a spot interruption notice (EventBridge's "EC2 Spot Instance Interruption
        Warning", two minutes ahead), as the loop's event source receives it."""
        self._notices[instance_id] = at

    def interruption_at(self, instance_id: str) -> float | None:
        """When EC2 said it will reclaim the instance, if it did."""
        return self._notices.get(instance_id)

    def instances(self, now: float = 0.0) -> list[Instance]:
        """This cluster's instances that are not terminated (DescribeInstances, paginated)."""
        pages = _paginate(
            self._ec2.describe_instances,
            "DescribeInstances",
            {"Filters": build_describe_instances_filters(self.cluster_tag)},
        )
        found = [
            parse_ec2_instance(data, self._price)
            for page in pages
            for reservation in page.get("Reservations", [])
            for data in reservation.get("Instances", [])
        ]
        return [i for i in found if i.state != "terminated"]


# -- HyperPod: requests and responses ----------------------------------------------------------


def build_add_nodes_request(cluster_name: str, group: str, count: int) -> dict[str, Any]:
    """BatchAddClusterNodes parameters adding ``count`` nodes to one instance group."""
    return {
        "ClusterName": cluster_name,
        "NodesToAdd": [{"InstanceGroupName": group, "IncrementTargetCountBy": count}],
    }


def parse_add_nodes_response(
    response: Mapping[str, Any], request: LaunchRequest, zone: str, price: float, now: float
) -> list[Instance]:
    """Nodes being added (one per ``Successful`` entry, identified by NodeLogicalId).

    With none added, ``Failed`` entries raise :class:`InsufficientCapacityError` for capacity
    errors and :class:`CloudError` otherwise.
    """
    added = [
        Instance(
            id=str(entry["NodeLogicalId"]),
            instance_type=request.instance_type,
            zone=(entry.get("AvailabilityZones") or [zone])[0],
            capacity_type="on-demand",
            price_per_hour=price,
            pool=request.pool,
            state=_HYPERPOD_STATES.get(str(entry.get("Status", "")), "pending"),
            launched_at=now,
        )
        for entry in response.get("Successful", [])
    ]
    if added:
        return added
    failures = [
        (
            str(f.get("InstanceGroupName", "")),
            str(f.get("ErrorCode", "")),
            str(f.get("Message", "")),
            int(f.get("FailedCount", 0)),
        )
        for f in response.get("Failed", [])
    ]
    for _, code, message, _ in failures:
        if is_capacity_error(code, message):
            raise InsufficientCapacityError(request, _capacity_message(request, code, message))
    if failures:
        raise CloudError(
            "BatchAddClusterNodes added nothing: "
            + "; ".join(f"{g}: {c} ({n} nodes): {m}".rstrip(": ") for g, c, m, n in failures)
        )
    raise CloudError("BatchAddClusterNodes added nothing and reported no failure")


def build_delete_nodes_request(cluster_name: str, node_ids: Sequence[str]) -> dict[str, Any]:
    """BatchDeleteClusterNodes parameters: EC2 instance ids go to ``NodeIds``, other ids
    (NodeLogicalIds) to ``NodeLogicalIds``."""
    instance_ids = [i for i in node_ids if _EC2_INSTANCE_ID.match(i)]
    logical_ids = [i for i in node_ids if not _EC2_INSTANCE_ID.match(i)]
    params: dict[str, Any] = {"ClusterName": cluster_name}
    if instance_ids:
        params["NodeIds"] = instance_ids
    if logical_ids:
        params["NodeLogicalIds"] = logical_ids
    return params


def parse_delete_nodes_response(response: Mapping[str, Any]) -> None:
    """Raise :class:`CloudError` listing every node BatchDeleteClusterNodes failed to delete."""
    failures = [
        f"{f.get('NodeId', '')}: {f.get('Code', '')}: {f.get('Message', '')}"
        for f in response.get("Failed", [])
    ] + [
        f"{f.get('NodeLogicalId', '')}: {f.get('Code', '')}: {f.get('Message', '')}"
        for f in response.get("FailedNodeLogicalIds", [])
    ]
    if failures:
        raise CloudError("BatchDeleteClusterNodes failed for " + "; ".join(failures))


def parse_cluster_node(
    summary: Mapping[str, Any],
    type_by_group: Mapping[str, str],
    zone_by_group: Mapping[str, str],
    price_of: Callable[[str], float],
    pool_of: Callable[[str, str], str],
) -> Instance | None:
    """One ListClusterNodes summary as an :class:`Instance` (``None`` for other groups)."""
    group = str(summary.get("InstanceGroupName", ""))
    if group not in type_by_group:
        return None
    node_id = str(summary.get("NodeLogicalId") or summary.get("InstanceId") or "")
    instance_type = type_by_group[group]
    status = str(summary.get("InstanceStatus", {}).get("Status", ""))
    return Instance(
        id=node_id,
        instance_type=instance_type,
        zone=zone_by_group.get(group, ""),
        capacity_type="on-demand",
        price_per_hour=price_of(instance_type),
        pool=pool_of(node_id, group),
        state=_HYPERPOD_STATES.get(status, "pending"),
        launched_at=_timestamp(summary.get("LaunchTime")),
    )


class HyperPodProvider:
    """Cloud provider on a SageMaker HyperPod cluster with pre-created instance groups.

    ``instance_groups`` maps an instance type (``ml.`` or EC2 name) to its instance group;
    ``zones`` optionally maps a group to its availability zone (``""`` = unknown: any
    requested zone is accepted). Prices default to the catalog's EC2 on-demand price; pass
    ``pricing`` for SageMaker's ``ml.`` prices. A node's pool is the one it was launched for
    by this provider object, else its instance group name.
    """

    def __init__(
        self,
        sagemaker_client: Any,
        cluster_name: str,
        instance_groups: Mapping[str, str],
        *,
        zones: Mapping[str, str] | None = None,
        pricing: Pricing | None = None,
        traits: CloudTraits | None = None,
    ) -> None:
        self.traits = traits or CloudTraits()
        self._unavailable = UnavailableOfferings(self.traits.ice_cooldown_seconds)
        self._sagemaker = sagemaker_client
        self.cluster_name = cluster_name
        self._group_by_type = {Catalog.ec2_name(t): g for t, g in instance_groups.items()}
        self._type_by_group = {g: t for t, g in instance_groups.items()}
        self._zones = dict(zones or {})
        self._pricing: Pricing = pricing if pricing is not None else load_catalog()
        self._pools: dict[str, str] = {}

    def _price(self, instance_type: str) -> float:
        return on_demand_price(self._pricing, instance_type) or 0.0

    def _group(self, instance_type: str) -> str:
        group = self._group_by_type.get(Catalog.ec2_name(instance_type))
        if group is None:
            raise CloudError(
                f"no HyperPod instance group for {instance_type} in cluster {self.cluster_name}"
            )
        return group

    def offerings(self, instance_types: Iterable[str], now: float = 0.0) -> list[Offering]:
        """One on-demand offering (in the group's zone) per type that has an instance group."""
        result: list[Offering] = []
        for instance_type in dict.fromkeys(instance_types):
            group = self._group_by_type.get(Catalog.ec2_name(instance_type))
            if group is not None:
                zone = self._zones.get(group, "")
                ok = self._unavailable.available(instance_type, zone, "on-demand", now)
                price = self._price(instance_type)
                result.append(Offering(instance_type, zone, "on-demand", price, ok))
        return result

    def launch(self, request: LaunchRequest, now: float) -> list[Instance]:
        """Add nodes to the type's instance group (several calls above 50 nodes)."""
        if request.capacity_type != "on-demand":
            raise CloudError(
                f"HyperPod offers on-demand capacity only, not {request.capacity_type}"
            )
        group = self._group(request.instance_type)
        zone = self._zones.get(group, "")
        if zone and request.zone and request.zone != zone:
            raise CloudError(f"instance group {group} is in {zone}, not {request.zone}")
        launched: list[Instance] = []
        remaining = request.count
        while remaining > 0:
            count = min(remaining, HYPERPOD_MAX_NODES_PER_CALL)
            remaining -= count
            params = build_add_nodes_request(self.cluster_name, group, count)
            try:
                response = _call(
                    self._sagemaker.batch_add_cluster_nodes, "BatchAddClusterNodes", **params
                )
                added = parse_add_nodes_response(
                    response, request, zone or request.zone, self._price(request.instance_type), now
                )
            except CloudError as exc:
                if isinstance(exc, InsufficientCapacityError):
                    self._unavailable.mark(request.instance_type, zone, "on-demand", now)
                if launched:
                    break  # keep the partial launch
                raise
            launched.extend(added)
            if len(added) < count:
                self._unavailable.mark(request.instance_type, zone, "on-demand", now)
                break  # short on capacity: do not ask for more
        for instance in launched:
            self._pools[instance.id] = request.pool
        return launched

    def terminate(self, instance_ids: Sequence[str], now: float) -> None:
        """Delete nodes by NodeLogicalId or EC2 instance id (at most 50 ids per call)."""
        for chunk in _chunks(list(instance_ids), HYPERPOD_MAX_IDS_PER_DELETE):
            params = build_delete_nodes_request(self.cluster_name, chunk)
            response = _call(
                self._sagemaker.batch_delete_cluster_nodes, "BatchDeleteClusterNodes", **params
            )
            parse_delete_nodes_response(response)

    def interruption_at(self, instance_id: str) -> float | None:
        """HyperPod nodes are on-demand: never interrupted."""
        return None

    def instances(self, now: float = 0.0) -> list[Instance]:
        """Nodes of the mapped instance groups that are not terminated or failed."""
        pages = _paginate(
            self._sagemaker.list_cluster_nodes,
            "ListClusterNodes",
            {"ClusterName": self.cluster_name, "IncludeNodeLogicalIds": True},
        )
        result: list[Instance] = []
        for page in pages:
            for summary in page.get("ClusterNodeSummaries", []):
                instance = parse_cluster_node(
                    summary,
                    self._type_by_group,
                    self._zones,
                    self._price,
                    lambda node_id, group: self._pools.get(node_id, group),
                )
                if instance is not None and instance.state != "terminated":
                    result.append(instance)
        return result
