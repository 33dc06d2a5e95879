"""EC2 and SageMaker HyperPod as the adapters see them: real boto3 clients whose calls
botocore's Stubber answers.

There is no AWS account here, so the answers come from a :class:`SimulatedCloud` (capacity,
prices, latency) and are written in the services' response shapes; the Stubber checks every
request and response against the real service models, so a wrong field name or type fails.
Each answer is queued just before its call (on ``provide-client-params``), from the call's
parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore import xform_name
from botocore.stub import Stubber

from fleetshare.autoscaling.aws import CLUSTER_TAG_KEY, POOL_TAG_KEY, SPOT_PRODUCT
from fleetshare.autoscaling.cloud import (
    AccountLimitError,
    InsufficientCapacityError,
    LaunchRequest,
)
from fleetshare.autoscaling.simulated_cloud import SimulatedCloud

_STATE_CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48}


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class _World:
    """A stubbed client of ``service`` answering from a simulated cloud at the clock's time."""

    service = ""

    def __init__(self, sim: SimulatedCloud, clock: Callable[[], float]) -> None:
        self.sim = sim
        self.clock = clock
        self.client = boto3.client(
            self.service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.stubber = Stubber(self.client)
        self.calls: list[str] = []
        self._ec2_ids: dict[str, str] = {}
        self._sim_ids: dict[str, str] = {}
        self.stubber.activate()
        # fires before the Stubber checks for a queued response (before-parameter-build)
        self.client.meta.events.register(f"provide-client-params.{self.service}.*", self._answer)

    id_format = "i-{:017x}"

    def _ec2_id(self, sim_id: str) -> str:
        found = self._ec2_ids.get(sim_id)
        if found is None:
            found = self.id_format.format(len(self._ec2_ids) + 1)
            self._ec2_ids[sim_id] = found
            self._sim_ids[found] = sim_id
        return found

    def _answer(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        operation = model.name
        self.calls.append(operation)
        handler = getattr(self, f"_{xform_name(operation)}")
        result = handler(params)
        method = xform_name(operation)
        if isinstance(result, tuple):  # (code, message): an error response
            code, message = result
            self.stubber.add_client_error(method, code, message, http_status_code=400)
        else:
            self.stubber.add_response(method, result)


class Ec2World(_World):
    """EC2: instant fleets, termination, instances by tag, spot prices, zones."""

    service = "ec2"

    def _describe_availability_zones(self, params: dict[str, Any]) -> dict[str, Any]:
        zones = [{"ZoneName": z, "State": "available"} for z in self.sim.config.zones]
        return {"AvailabilityZones": zones}

    def _describe_spot_price_history(self, params: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        history = [
            {
                "AvailabilityZone": o.zone,
                "InstanceType": o.instance_type,
                "ProductDescription": SPOT_PRODUCT,
                "SpotPrice": repr(o.price_per_hour),
                "Timestamp": _when(now),
            }
            for o in self.sim.offerings(params["InstanceTypes"], now)
            if o.capacity_type == "spot"
        ]
        return {"SpotPriceHistory": history}

    def _create_fleet(self, params: dict[str, Any]) -> dict[str, Any] | tuple[str, str]:
        config = params["LaunchTemplateConfigs"][0]
        override = config["Overrides"][0]
        target = params["TargetCapacitySpecification"]
        tags = {t["Key"]: t["Value"] for t in params["TagSpecifications"][0]["Tags"]}
        capacity_type = target["DefaultTargetCapacityType"]
        request = LaunchRequest(
            override["InstanceType"],
            override["AvailabilityZone"],
            capacity_type,
            target["TotalTargetCapacity"],
            pool=tags[POOL_TAG_KEY],
        )
        lt = config["LaunchTemplateSpecification"]
        applied = {
            "LaunchTemplateSpecification": {
                "LaunchTemplateId": lt["LaunchTemplateId"],
                "Version": "1",
            },
            "Overrides": {
                "InstanceType": request.instance_type,
                "AvailabilityZone": request.zone,
            },
        }
        try:
            launched = self.sim.launch(request, self.clock())
        except InsufficientCapacityError as exc:
            error = {
                "LaunchTemplateAndOverrides": applied,
                "Lifecycle": capacity_type,
                "ErrorCode": "InsufficientInstanceCapacity",
                "ErrorMessage": str(exc),
            }
            return {"FleetId": "fleet-1", "Errors": [error], "Instances": []}
        except AccountLimitError as exc:
            return exc.code, str(exc)
        instances = [
            {
                "LaunchTemplateAndOverrides": applied,
                "Lifecycle": capacity_type,
                "InstanceIds": [self._ec2_id(i.id) for i in launched],
                "InstanceType": request.instance_type,
            }
        ]
        return {"FleetId": "fleet-1", "Errors": [], "Instances": instances}

    def _terminate_instances(self, params: dict[str, Any]) -> dict[str, Any] | tuple[str, str]:
        ids = params["InstanceIds"]
        unknown = [i for i in ids if i not in self._sim_ids]
        if unknown:
            return (
                "InvalidInstanceID.NotFound",
                f"The instance IDs '{', '.join(unknown)}' do not exist",
            )
        self.sim.terminate([self._sim_ids[i] for i in ids], self.clock())
        return {
            "TerminatingInstances": [
                {
                    "InstanceId": i,
                    "CurrentState": {"Code": 32, "Name": "shutting-down"},
                    "PreviousState": {"Code": 16, "Name": "running"},
                }
                for i in ids
            ]
        }

    def _describe_instances(self, params: dict[str, Any]) -> dict[str, Any]:
        filters = {f["Name"]: f["Values"] for f in params.get("Filters", [])}
        cluster = filters.get(f"tag:{CLUSTER_TAG_KEY}", [None])[0]
        now = self.clock()
        found = []
        for instance in self.sim.instances(now):
            state = "running" if instance.state == "running" else "pending"
            entry: dict[str, Any] = {
                "InstanceId": self._ec2_id(instance.id),
                "InstanceType": instance.instance_type,
                "Placement": {"AvailabilityZone": instance.zone},
                "State": {"Code": _STATE_CODES[state], "Name": state},
                "LaunchTime": _when(instance.launched_at),
                "Tags": [
                    {"Key": CLUSTER_TAG_KEY, "Value": cluster or ""},
                    {"Key": POOL_TAG_KEY, "Value": instance.pool},
                ],
            }
            if instance.capacity_type == "spot":
                entry["InstanceLifecycle"] = "spot"
            found.append(entry)
        return {"Reservations": [{"Instances": found}] if found else []}


class HyperPodWorld(_World):
    """SageMaker HyperPod: nodes added to and deleted from pre-created instance groups."""

    service = "sagemaker"
    id_format = "node-{:06d}"
    """NodeLogicalIds (the adapter deletes by them; EC2 ids would go to NodeIds)."""

    def __init__(
        self,
        sim: SimulatedCloud,
        clock: Callable[[], float],
        groups: dict[str, tuple[str, str]],
    ) -> None:
        """``groups``: instance group -> (``ml.`` instance type, zone)."""
        super().__init__(sim, clock)
        self.groups = groups
        self._group_of: dict[str, str] = {}

    def _batch_add_cluster_nodes(self, params: dict[str, Any]) -> dict[str, Any]:
        successful: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for entry in params["NodesToAdd"]:
            group = entry["InstanceGroupName"]
            instance_type, zone = self.groups[group]
            count = entry["IncrementTargetCountBy"]
            request = LaunchRequest(instance_type, zone, "on-demand", count, pool=group)
            try:
                launched = self.sim.launch(request, self.clock())
            except InsufficientCapacityError as exc:
                failed.append(
                    {
                        "InstanceGroupName": group,
                        "ErrorCode": "InsufficientCapacity",
                        "FailedCount": count,
                        "Message": str(exc),
                    }
                )
                continue
            for instance in launched:
                node_id = self._ec2_id(instance.id)
                self._group_of[node_id] = group
                successful.append(
                    {"NodeLogicalId": node_id, "InstanceGroupName": group, "Status": "Pending"}
                )
            if len(launched) < count:
                failed.append(
                    {
                        "InstanceGroupName": group,
                        "ErrorCode": "InsufficientCapacity",
                        "FailedCount": count - len(launched),
                        "Message": "insufficient capacity",
                    }
                )
        return {"Successful": successful, "Failed": failed}

    def _batch_delete_cluster_nodes(self, params: dict[str, Any]) -> dict[str, Any]:
        logical = params.get("NodeLogicalIds", [])
        known = [i for i in logical if i in self._sim_ids]
        self.sim.terminate([self._sim_ids[i] for i in known], self.clock())
        missing = [
            {"Code": "NodeIdNotFound", "Message": "no such node", "NodeLogicalId": i}
            for i in logical
            if i not in self._sim_ids
        ]
        out: dict[str, Any] = {"SuccessfulNodeLogicalIds": known}
        if missing:
            out["FailedNodeLogicalIds"] = missing
        return out

    def _list_cluster_nodes(self, params: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        summaries = []
        for instance in self.sim.instances(now):
            node_id = self._ec2_id(instance.id)
            group = self._group_of[node_id]
            summaries.append(
                {
                    "InstanceGroupName": group,
                    "InstanceId": "i-" + node_id.removeprefix("node-").rjust(17, "0"),
                    "NodeLogicalId": node_id,
                    "InstanceType": self.groups[group][0],
                    "LaunchTime": _when(instance.launched_at),
                    "InstanceStatus": {
                        "Status": "Running" if instance.state == "running" else "Pending"
                    },
                }
            )
        return {"ClusterNodeSummaries": summaries}
