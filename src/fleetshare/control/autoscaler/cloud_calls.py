"""The effect layer: the one place a step changes the cloud (Karpenter's NodeClaim lifecycle
calling the cloud provider).

A step's decision is a generator (:data:`~.launching.Decision`): it yields each
:class:`~fleetshare.autoscaling.cloud.LaunchRequest` it decides on and is sent back what came
of it, a :class:`~.launching.Launched` (the instances, or the capacity shortage or account
limit that refused them). :func:`drive` is the loop between the two: it decides nothing, so a
decision re-plans after a shortage within the same step exactly as when it called the cloud
itself.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

from fleetshare.autoscaling.cloud import (
    AccountLimitError,
    CloudProvider,
    InsufficientCapacityError,
    LaunchRequest,
)
from fleetshare.control.autoscaler.launching import Launched, Shortage

T = TypeVar("T")


def launch(cloud: CloudProvider, request: LaunchRequest, now: float) -> Launched:
    """Launch one request; a capacity shortage or an account limit comes back as data (any
    other cloud error is raised)."""
    try:
        return Launched(tuple(cloud.launch(request, now)))
    except InsufficientCapacityError as exc:
        return Launched(shortage=Shortage(exc.instance_type, exc.zone, exc.capacity_type, str(exc)))
    except AccountLimitError as exc:
        return Launched(refused=str(exc))


def drive(decision: Generator[LaunchRequest, Launched, T], cloud: CloudProvider, now: float) -> T:
    """Run a decision to its end, launching what it asks for as it asks; its result."""
    try:
        request = next(decision)
        while True:
            request = decision.send(launch(cloud, request, now))
    except StopIteration as done:
        result: T = done.value
        return result


def terminate(cloud: CloudProvider, instance_id: str, now: float) -> None:
    """Terminate one instance."""
    cloud.terminate([instance_id], now)
