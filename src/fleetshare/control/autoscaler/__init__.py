"""The autoscaler's control loop: pending work in, cloud calls out.

Each time the scenario runner (or the simulator) has settled a moment, it calls
:meth:`Autoscaler.step`. The step

1. notes which of its nodes are empty or unhealthy, and which spot instances are interrupted;
2. removes nodes unhealthy for ``repair_after_seconds``. Their workloads were requeued
   through governance when the node failed, and the capacity they need is replaced at once by
   provisioning (step 3) — as in Karpenter, where evicted pods drive the replacement — so a
   node whose work already moved elsewhere is not replaced for nothing. Pools with a floor
   (instance-group minimums, schedules) get their count back by step 4;
3. batches new demand — pending workloads that governance would admit if the nodes were there
   (:func:`~fleetshare.governance.demand.admissible_demand`) and that no launched-but-not-yet-
   ready node was launched for — for ``batch_idle_seconds`` (at most ``batch_max_seconds``),
   then plans the cheapest launches (:func:`~fleetshare.autoscaling.provisioner.plan_nodes`)
   and launches them; an offering that runs out of capacity is marked unavailable by the cloud
   and the rest is re-planned at once;
4. keeps scheduled pool floors and ceilings, and removes nodes empty for their pool's
   ``consolidate_after`` (down to zero), then asks :mod:`~fleetshare.autoscaling.disruption`
   for at most one consolidation, expiry or drift action.

It returns what the runner must apply: nodes that join later (launch latency), nodes to
remove (with a reason; the runner requeues their workloads), and when to call again.

The step's decision never calls the cloud to change it: it yields typed launch requests and
is sent back what came of each (:mod:`.cloud_calls`, the effect layer, runs it). Modules, along
Karpenter's lines:

- ``controller.py`` — the :class:`Autoscaler` facade and its step;
- ``nodes.py`` — the managed nodes (Karpenter's ``state.Cluster``) and the notes on pending work;
- ``provisioning.py`` — batching, planning and re-planning after a shortage;
- ``launching.py`` — launch requests out, instances or shortages recorded;
- ``cloud_calls.py`` — the effect layer: launch, terminate, and the driver of a decision;
- ``headroom.py`` — configured headroom and warm pools;
- ``bounds.py`` — floors, ceilings and schedules;
- ``disruption.py`` — repair, emptiness and voluntary disruption carried out;
  ``disruption_views.py`` — what the disruption methods see;
- ``room.py`` — free room on nodes; ``setup.py`` — pools, settings, the cloud read only;
  ``step.py`` — what a step hands the runner.
"""

from fleetshare.control.autoscaler.controller import Autoscaler
from fleetshare.control.autoscaler.disruption import action_removal
from fleetshare.control.autoscaler.nodes import ManagedNode
from fleetshare.control.autoscaler.step import Moment, Step, removal

__all__ = ["Autoscaler", "ManagedNode", "Moment", "Step", "action_removal", "removal"]
