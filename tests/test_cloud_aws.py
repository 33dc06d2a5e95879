"""AWS adapters against botocore's Stubber, which checks requests and responses against the
real service models (a wrong field name fails the test); nothing reaches the network."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from fleetshare.autoscaling.aws import (
    Ec2FleetProvider,
    HyperPodProvider,
    build_delete_nodes_request,
    on_demand_price,
)
from fleetshare.autoscaling.cloud import (
    CapacityType,
    CloudError,
    CloudProvider,
    InsufficientCapacityError,
    LaunchRequest,
)
from fleetshare.model.catalog import load_catalog

LT = "lt-0123456789abcdef0"
CLUSTER = "team-gpus"
P4D = "p4d.24xlarge"
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
I1, I2, I3 = "i-0123456789abcdef0", "i-0123456789abcdef1", "i-0123456789abcdef2"
P4D_PRICE = load_catalog().get(P4D).price_per_hour


def client(service: str) -> Any:
    return boto3.client(
        service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


@pytest.fixture
def ec2() -> Iterator[tuple[Ec2FleetProvider, Stubber]]:
    ec2_client = client("ec2")
    with Stubber(ec2_client) as stubber:
        provider = Ec2FleetProvider(
            ec2_client, LT, CLUSTER, zones=["us-east-1a", "us-east-1b"], clock=lambda: NOW
        )
        yield provider, stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def hyperpod() -> Iterator[tuple[HyperPodProvider, Stubber]]:
    sagemaker = client("sagemaker")
    with Stubber(sagemaker) as stubber:
        provider = HyperPodProvider(
            sagemaker,
            CLUSTER,
            {"ml.p4d.24xlarge": "gpu-p4d", "ml.g5.8xlarge": "gpu-g5"},
            zones={"gpu-p4d": "us-west-2a"},
        )
        yield provider, stubber
        stubber.assert_no_pending_responses()


def launch_request(
    count: int = 2, capacity_type: CapacityType = "on-demand", zone: str = "us-east-1a"
) -> LaunchRequest:
    return LaunchRequest(P4D, zone, capacity_type, count, pool="training")


# -- EC2 ---------------------------------------------------------------------------------------


def fleet_params(count: int, capacity_type: str = "on-demand") -> dict[str, Any]:
    """The CreateFleet request, written out in full so the test pins the exact shape."""
    return {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": LT, "Version": "$Latest"},
                "Overrides": [{"InstanceType": P4D, "AvailabilityZone": "us-east-1a"}],
            }
        ],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": capacity_type,
        },
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "fleetshare.io/cluster", "Value": CLUSTER},
                    {"Key": "fleetshare.io/pool", "Value": "training"},
                ],
            }
        ],
    }


def overrides() -> dict[str, Any]:
    return {
        "LaunchTemplateSpecification": {"LaunchTemplateId": LT, "Version": "1"},
        "Overrides": {"InstanceType": P4D, "AvailabilityZone": "us-east-1a"},
    }


def fleet_instances(ids: list[str], lifecycle: str = "on-demand") -> list[dict[str, Any]]:
    return [
        {
            "LaunchTemplateAndOverrides": overrides(),
            "Lifecycle": lifecycle,
            "InstanceIds": ids,
            "InstanceType": P4D,
        }
    ]


ICE_ERROR = {
    "LaunchTemplateAndOverrides": overrides(),
    "Lifecycle": "on-demand",
    "ErrorCode": "InsufficientInstanceCapacity",
    "ErrorMessage": "We currently do not have sufficient p4d.24xlarge capacity in the "
    "Availability Zone you requested (us-east-1a).",
}


def test_providers_satisfy_the_protocol() -> None:
    providers: list[CloudProvider] = [
        Ec2FleetProvider(client("ec2"), LT, CLUSTER, zones=["us-east-1a"]),
        HyperPodProvider(client("sagemaker"), CLUSTER, {}),
    ]
    assert len(providers) == 2


def test_create_fleet_success(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    stubber.add_response(
        "create_fleet",
        {"FleetId": "fleet-1", "Errors": [], "Instances": fleet_instances([I1, I2])},
        fleet_params(2),
    )
    launched = provider.launch(launch_request(2), now=50.0)
    assert [i.id for i in launched] == [I1, I2]
    for instance in launched:
        assert (instance.instance_type, instance.zone, instance.capacity_type) == (
            P4D,
            "us-east-1a",
            "on-demand",
        )
        assert instance.price_per_hour == P4D_PRICE
        assert (instance.pool, instance.state, instance.launched_at) == ("training", "pending", 50)
        assert instance.ready_at is None


def test_create_fleet_spot(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    stubber.add_response(
        "create_fleet",
        {"FleetId": "fleet-2", "Errors": [], "Instances": fleet_instances([I1], "spot")},
        fleet_params(1, "spot"),
    )
    (instance,) = provider.launch(launch_request(1, "spot"), now=0.0)
    assert instance.capacity_type == "spot"


def test_create_fleet_insufficient_capacity(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    stubber.add_response(
        "create_fleet",
        {"FleetId": "fleet-3", "Errors": [ICE_ERROR], "Instances": []},
        fleet_params(2),
    )
    with pytest.raises(InsufficientCapacityError) as caught:
        provider.launch(launch_request(2), now=0.0)
    error = caught.value
    assert (error.instance_type, error.zone, error.capacity_type) == (
        P4D,
        "us-east-1a",
        "on-demand",
    )
    assert "p4d.24xlarge" in str(error) and "us-east-1a" in str(error)
    assert "InsufficientInstanceCapacity" in str(error)


def test_create_fleet_partial(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    stubber.add_response(
        "create_fleet",
        {"FleetId": "fleet-4", "Errors": [ICE_ERROR], "Instances": fleet_instances([I1])},
        fleet_params(3),
    )
    assert [i.id for i in provider.launch(launch_request(3), now=0.0)] == [I1]


def test_create_fleet_other_errors(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    error = {
        "LaunchTemplateAndOverrides": overrides(),
        "Lifecycle": "on-demand",
        "ErrorCode": "InvalidLaunchTemplateId.NotFound",
        "ErrorMessage": "The specified launch template does not exist.",
    }
    stubber.add_response(
        "create_fleet", {"FleetId": "fleet-5", "Errors": [error], "Instances": []}, fleet_params(1)
    )
    with pytest.raises(CloudError, match=r"InvalidLaunchTemplateId\.NotFound") as caught:
        provider.launch(launch_request(1), now=0.0)
    assert not isinstance(caught.value, InsufficientCapacityError)

    stubber.add_client_error(
        "create_fleet",
        service_error_code="InsufficientInstanceCapacity",
        service_message="no capacity",
        expected_params=fleet_params(1),
    )
    with pytest.raises(InsufficientCapacityError, match="no capacity"):
        provider.launch(launch_request(1), now=0.0)

    stubber.add_client_error(
        "create_fleet",
        service_error_code="UnauthorizedOperation",
        service_message="not allowed",
        expected_params=fleet_params(1),
    )
    with pytest.raises(CloudError, match="CreateFleet: UnauthorizedOperation: not allowed"):
        provider.launch(launch_request(1), now=0.0)


def test_reserved_is_not_launched_by_ec2_fleets(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, _ = ec2
    with pytest.raises(CloudError, match="reserved"):
        provider.launch(launch_request(1, "reserved"), now=0.0)


def test_terminate_instances(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    stubber.add_response(
        "terminate_instances",
        {
            "TerminatingInstances": [
                {
                    "InstanceId": I1,
                    "CurrentState": {"Code": 32, "Name": "shutting-down"},
                    "PreviousState": {"Code": 16, "Name": "running"},
                }
            ]
        },
        {"InstanceIds": [I1]},
    )
    provider.terminate([I1], now=0.0)
    stubber.add_client_error(
        "terminate_instances",
        service_error_code="InvalidInstanceID.NotFound",
        service_message=f"The instance ID '{I3}' does not exist",
        expected_params={"InstanceIds": [I3]},
    )
    with pytest.raises(CloudError, match=r"InvalidInstanceID\.NotFound"):
        provider.terminate([I3], now=0.0)


def ec2_instance(
    instance_id: str, state: str, zone: str, pool: str | None, spot: bool = False
) -> dict[str, Any]:
    tags = [{"Key": "fleetshare.io/cluster", "Value": CLUSTER}]
    if pool is not None:
        tags.append({"Key": "fleetshare.io/pool", "Value": pool})
    data: dict[str, Any] = {
        "InstanceId": instance_id,
        "InstanceType": P4D,
        "LaunchTime": NOW,
        "Placement": {"AvailabilityZone": zone},
        "State": {"Code": 16, "Name": state},
        "Tags": tags,
    }
    if spot:
        data["InstanceLifecycle"] = "spot"
    return data


def test_describe_instances_paginates(ec2: tuple[Ec2FleetProvider, Stubber]) -> None:
    provider, stubber = ec2
    filters = [
        {"Name": "tag:fleetshare.io/cluster", "Values": [CLUSTER]},
        {
            "Name": "instance-state-name",
            "Values": ["pending", "running", "shutting-down", "stopping", "stopped"],
        },
    ]
    stubber.add_response(
        "describe_instances",
        {
            "Reservations": [
                {
                    "ReservationId": "r-1",
                    "Instances": [
                        ec2_instance(I1, "running", "us-east-1a", "training", spot=True),
                        ec2_instance(I2, "pending", "us-east-1b", "training"),
                    ],
                }
            ],
            "NextToken": "page-2",
        },
        {"Filters": filters},
    )
    stubber.add_response(
        "describe_instances",
        {
            "Reservations": [
                {
                    "ReservationId": "r-2",
                    "Instances": [ec2_instance(I3, "shutting-down", "us-east-1a", None)],
                }
            ]
        },
        {"Filters": filters, "NextToken": "page-2"},
    )
    found = {i.id: i for i in provider.instances()}
    assert list(found) == [I1, I2, I3]
    assert (found[I1].capacity_type, found[I1].state, found[I1].pool) == (
        "spot",
        "running",
        "training",
    )
    assert (found[I2].capacity_type, found[I2].state, found[I2].zone) == (
        "on-demand",
        "pending",
        "us-east-1b",
    )
    assert (found[I3].state, found[I3].pool) == ("terminating", "")
    assert found[I2].launched_at == NOW.timestamp()
    assert found[I2].price_per_hour == P4D_PRICE


def test_offerings_with_spot_price_history() -> None:
    ec2_client = client("ec2")
    provider = Ec2FleetProvider(ec2_client, LT, CLUSTER, {P4D: 30.0}, clock=lambda: NOW)
    with Stubber(ec2_client) as stubber:
        stubber.add_response(
            "describe_availability_zones",
            {
                "AvailabilityZones": [
                    {"ZoneName": "us-east-1b", "State": "available"},
                    {"ZoneName": "us-east-1a", "State": "available"},
                ]
            },
            {
                "Filters": [
                    {"Name": "zone-type", "Values": ["availability-zone"]},
                    {"Name": "state", "Values": ["available"]},
                ]
            },
        )
        history = {"InstanceTypes": [P4D], "ProductDescriptions": ["Linux/UNIX"], "StartTime": NOW}

        def price(zone: str, usd: str, hour: int) -> dict[str, Any]:
            return {
                "AvailabilityZone": zone,
                "InstanceType": P4D,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": usd,
                "Timestamp": datetime(2025, 1, 2, hour, tzinfo=UTC),
            }

        stubber.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": [price("us-east-1a", "9.5", 1)], "NextToken": "more"},
            history,
        )
        stubber.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": [price("us-east-1a", "10.5", 2), price("us-east-1a", "8", 0)]},
            {**history, "NextToken": "more"},
        )
        offers = {(o.zone, o.capacity_type): o.price_per_hour for o in provider.offerings([P4D])}
        stubber.assert_no_pending_responses()
    assert offers == {
        ("us-east-1a", "spot"): 10.5,  # the newest price
        ("us-east-1a", "on-demand"): 30.0,
        ("us-east-1b", "on-demand"): 30.0,
    }


def test_offerings_without_spot_make_no_calls() -> None:
    ec2_client = client("ec2")
    provider = Ec2FleetProvider(ec2_client, LT, CLUSTER, zones=["us-east-1a"], spot_prices=False)
    with Stubber(ec2_client):  # no responses queued: any call would fail
        (offer,) = provider.offerings([P4D])
    assert (offer.capacity_type, offer.price_per_hour) == ("on-demand", P4D_PRICE)


def test_on_demand_price_sources() -> None:
    assert on_demand_price({"p4d.24xlarge": 1.5}, "ml.p4d.24xlarge") == 1.5
    assert on_demand_price({}, P4D) is None
    assert on_demand_price(load_catalog(), "ml.p4d.24xlarge") == P4D_PRICE
    assert on_demand_price(load_catalog(), "zz.nope") is None


# -- HyperPod ----------------------------------------------------------------------------------


def add_params(group: str, count: int) -> dict[str, Any]:
    return {
        "ClusterName": CLUSTER,
        "NodesToAdd": [{"InstanceGroupName": group, "IncrementTargetCountBy": count}],
    }


def added(group: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "NodeLogicalId": f"{group}-node-{start + k}",
            "InstanceGroupName": group,
            "Status": "Pending",
        }
        for k in range(n)
    ]


def hp_request(count: int = 2, **options: Any) -> LaunchRequest:
    fields: dict[str, Any] = {
        "instance_type": "ml.p4d.24xlarge",
        "zone": "us-west-2a",
        "capacity_type": "on-demand",
        "count": count,
        "pool": "training",
    }
    fields.update(options)
    return LaunchRequest(**fields)


def test_hyperpod_offerings(hyperpod: tuple[HyperPodProvider, Stubber]) -> None:
    provider, _ = hyperpod
    offers = provider.offerings(["ml.p4d.24xlarge", "g5.8xlarge", "ml.p5.48xlarge"])
    assert [(o.instance_type, o.zone, o.capacity_type) for o in offers] == [
        ("ml.p4d.24xlarge", "us-west-2a", "on-demand"),
        ("g5.8xlarge", "", "on-demand"),
    ]
    assert offers[0].price_per_hour == P4D_PRICE


def test_batch_add_cluster_nodes_success(hyperpod: tuple[HyperPodProvider, Stubber]) -> None:
    provider, stubber = hyperpod
    stubber.add_response(
        "batch_add_cluster_nodes",
        {"Successful": added("gpu-p4d", 2), "Failed": []},
        add_params("gpu-p4d", 2),
    )
    launched = provider.launch(hp_request(2), now=10.0)
    assert [i.id for i in launched] == ["gpu-p4d-node-0", "gpu-p4d-node-1"]
    assert all(
        (i.instance_type, i.zone, i.capacity_type, i.state, i.pool, i.launched_at)
        == ("ml.p4d.24xlarge", "us-west-2a", "on-demand", "pending", "training", 10.0)
        for i in launched
    )


def test_batch_add_cluster_nodes_in_chunks_of_50(
    hyperpod: tuple[HyperPodProvider, Stubber],
) -> None:
    provider, stubber = hyperpod
    stubber.add_response(
        "batch_add_cluster_nodes",
        {"Successful": added("gpu-g5", 50), "Failed": []},
        add_params("gpu-g5", 50),
    )
    stubber.add_response(
        "batch_add_cluster_nodes",
        {"Successful": added("gpu-g5", 10, start=50), "Failed": []},
        add_params("gpu-g5", 10),
    )
    launched = provider.launch(hp_request(60, instance_type="ml.g5.8xlarge", zone=""), now=0.0)
    assert len({i.id for i in launched}) == 60


def test_batch_add_cluster_nodes_failures(hyperpod: tuple[HyperPodProvider, Stubber]) -> None:
    provider, stubber = hyperpod
    stubber.add_response(
        "batch_add_cluster_nodes",
        {
            "Successful": [],
            "Failed": [
                {
                    "InstanceGroupName": "gpu-p4d",
                    "ErrorCode": "InvalidInstanceGroupStatus",
                    "FailedCount": 2,
                    "Message": "Instance group gpu-p4d is updating",
                }
            ],
        },
        add_params("gpu-p4d", 2),
    )
    with pytest.raises(CloudError, match=r"InvalidInstanceGroupStatus.*updating") as caught:
        provider.launch(hp_request(2), now=0.0)
    assert not isinstance(caught.value, InsufficientCapacityError)

    stubber.add_response(
        "batch_add_cluster_nodes",
        {
            "Successful": [],
            "Failed": [
                {
                    "InstanceGroupName": "gpu-p4d",
                    "ErrorCode": "InsufficientCapacity",
                    "FailedCount": 2,
                    "Message": "Insufficient capacity for ml.p4d.24xlarge",
                }
            ],
        },
        add_params("gpu-p4d", 2),
    )
    with pytest.raises(InsufficientCapacityError) as ice:
        provider.launch(hp_request(2), now=0.0)
    assert (ice.value.instance_type, ice.value.zone) == ("ml.p4d.24xlarge", "us-west-2a")

    stubber.add_client_error(
        "batch_add_cluster_nodes",
        service_error_code="ResourceLimitExceeded",
        service_message="too many nodes",
        expected_params=add_params("gpu-p4d", 1),
    )
    with pytest.raises(CloudError, match="BatchAddClusterNodes: ResourceLimitExceeded"):
        provider.launch(hp_request(1), now=0.0)


def test_hyperpod_rejects_what_it_cannot_launch(hyperpod: tuple[HyperPodProvider, Stubber]) -> None:
    provider, _ = hyperpod
    with pytest.raises(CloudError, match="on-demand"):
        provider.launch(hp_request(capacity_type="spot"), now=0.0)
    with pytest.raises(CloudError, match="us-west-2a"):
        provider.launch(hp_request(zone="us-west-2b"), now=0.0)
    with pytest.raises(CloudError, match="no HyperPod instance group"):
        provider.launch(hp_request(instance_type="ml.p5.48xlarge"), now=0.0)


def test_batch_delete_cluster_nodes(hyperpod: tuple[HyperPodProvider, Stubber]) -> None:
    provider, stubber = hyperpod
    stubber.add_response(
        "batch_delete_cluster_nodes",
        {"Successful": [I1], "SuccessfulNodeLogicalIds": ["gpu-p4d-node-0"]},
        {"ClusterName": CLUSTER, "NodeIds": [I1], "NodeLogicalIds": ["gpu-p4d-node-0"]},
    )
    provider.terminate([I1, "gpu-p4d-node-0"], now=0.0)
    stubber.add_response(
        "batch_delete_cluster_nodes",
        {
            "Successful": [I1],
            "Failed": [{"Code": "NodeIdNotFound", "Message": "no such node", "NodeId": I2}],
        },
        {"ClusterName": CLUSTER, "NodeIds": [I1, I2]},
    )
    with pytest.raises(CloudError, match=f"{I2}: NodeIdNotFound: no such node"):
        provider.terminate([I1, I2], now=0.0)
    stubber.add_response(
        "batch_delete_cluster_nodes",
        {
            "FailedNodeLogicalIds": [
                {"Code": "InvalidNodeStatus", "Message": "busy", "NodeLogicalId": "gpu-g5-node-3"}
            ]
        },
        {"ClusterName": CLUSTER, "NodeLogicalIds": ["gpu-g5-node-3"]},
    )
    with pytest.raises(CloudError, match="gpu-g5-node-3: InvalidNodeStatus"):
        provider.terminate(["gpu-g5-node-3"], now=0.0)


def test_delete_request_splits_ids() -> None:
    assert build_delete_nodes_request("c", ["i-0123abcd", "node-1"]) == {
        "ClusterName": "c",
        "NodeIds": ["i-0123abcd"],
        "NodeLogicalIds": ["node-1"],
    }


def node(
    group: str, instance_id: str, status: str, logical_id: str | None = None
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "InstanceGroupName": group,
        "InstanceId": instance_id,
        "InstanceType": "ml.p4d.24xlarge" if group == "gpu-p4d" else "ml.m5.xlarge",
        "LaunchTime": NOW,
        "InstanceStatus": {"Status": status},
    }
    if logical_id is not None:
        summary["NodeLogicalId"] = logical_id
    return summary


def test_list_cluster_nodes_paginates(hyperpod: tuple[HyperPodProvider, Stubber]) -> None:
    provider, stubber = hyperpod
    stubber.add_response(
        "batch_add_cluster_nodes",
        {"Successful": added("gpu-p4d", 1), "Failed": []},
        add_params("gpu-p4d", 1),
    )
    provider.launch(hp_request(1), now=0.0)
    params = {"ClusterName": CLUSTER, "IncludeNodeLogicalIds": True}
    stubber.add_response(
        "list_cluster_nodes",
        {
            "ClusterNodeSummaries": [
                node("gpu-p4d", I1, "Running", "gpu-p4d-node-0"),
                node("controller", I2, "Running"),  # not a managed group
            ],
            "NextToken": "next",
        },
        params,
    )
    stubber.add_response(
        "list_cluster_nodes",
        {
            "ClusterNodeSummaries": [
                node("gpu-p4d", I3, "DeepHealthCheckInProgress"),
                node("gpu-p4d", "i-0123456789abcdef3", "Failure"),
            ]
        },
        {**params, "NextToken": "next"},
    )
    found = {i.id: i for i in provider.instances()}
    assert list(found) == ["gpu-p4d-node-0", I3]
    first, second = found["gpu-p4d-node-0"], found[I3]
    assert (first.state, first.pool, first.zone) == ("running", "training", "us-west-2a")
    assert (second.state, second.pool) == ("pending", "gpu-p4d")
    assert first.instance_type == "ml.p4d.24xlarge" and first.capacity_type == "on-demand"
    assert first.launched_at == NOW.timestamp()
