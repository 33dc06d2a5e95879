"""Provisioning (Karpenter's ``provisioning/``): pending work that quota would admit and no
node has room for is batched, planned (:func:`~fleetshare.autoscaling.provisioner.plan_nodes`)
and launched; after a capacity shortage the rest is planned again in the same step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from fleetshare.autoscaling.nodepool import NODES, add_node, limit_passed
from fleetshare.autoscaling.provisioner import Launch, Plan, PodShape, plan_nodes
from fleetshare.control.autoscaler.bounds import bounds, open_pools
from fleetshare.control.autoscaler.headroom import Headroom
from fleetshare.control.autoscaler.launching import Decision, Launcher
from fleetshare.control.autoscaler.room import first_fit, free_room
from fleetshare.control.autoscaler.step import Step
from fleetshare.governance.admission import Engine
from fleetshare.governance.demand import Demand, admissible_demand
from fleetshare.governance.snapshot import Snapshot
from fleetshare.governance.state import StateCache
from fleetshare.model.reason import Keyed, PendingReason
from fleetshare.placement.first_fit import Room
from fleetshare.placement.topology import constraint

MAX_REPLANS = 3


def shapes(
    demand: Sequence[Demand], free: list[Room] | None = None, used: set[str] | None = None
) -> list[PodShape]:
    """The pods of ``demand`` that find no room in ``free`` (taken as they fit; the nodes
    used are added to ``used``), grouped into the planner's pod shapes."""
    grouped: dict[tuple[object, ...], PodShape] = {}
    full: set[tuple[object, ...]] = set()  # pod kinds that found no room left: room
    # only shrinks here, so they never will (thousands of pods no node takes were each
    # tried on every room)
    for item in demand:
        # A workload is admitted whole, so its pods are bought whole: nodes for part of a
        # gang would sit idle (and be consolidated away, and bought again, ...).
        pods = sum(podset.count for podset in item.workload.podsets)
        gang = item.workload.name if pods > 1 else None
        for podset, flavor_selector in zip(item.workload.podsets, item.node_selectors, strict=True):
            selector = {**podset.node_selector, **flavor_selector}
            count = podset.count
            level, required = constraint(podset.required_topology, podset.preferred_topology)
            kind = (
                tuple(sorted(podset.requests.items())),
                tuple(sorted(selector.items())),
                podset.tolerations,
                podset.affinity,
                # pods kept in one domain place differently: a kind of their own
                (level, required) if level and gang else None,
            )
            if free and kind not in full:
                placed = first_fit(podset, selector, count, free, used)
                if placed < count:
                    full.add(kind)
                count -= placed
            if count <= 0:
                continue
            # a gang's pod set kept in one domain is a shape of its own
            key = (*kind, gang, podset.name if level and gang else None)
            old = grouped.get(key)
            grouped[key] = PodShape(
                requests=key[0],
                count=(old.count if old else 0) + count,
                node_selector=key[1],
                tolerations=podset.tolerations,
                affinity=podset.affinity,
                workloads=(*(old.workloads if old else ()), item.workload.name),
                gang=gang,
                domain=level if gang else None,
                domain_required=required,
            )
    return list(grouped.values())


class Provisioner:
    """Batches demand, plans nodes for it and launches them; remembers what it could not."""

    def __init__(self, launcher: Launcher, headroom: Headroom) -> None:
        self.launcher = launcher
        self.headroom = headroom
        self.book = launcher.book
        self.setup = launcher.setup
        self.states: StateCache | None = StateCache()
        """Builds each step's governance state from the last one's (None: from scratch, as
        the reference runs do; the same state either way)."""
        self.seen: set[str] = set()
        """Demand already batched (planned, or waiting in the batch)."""
        self.batch_start: float | None = None
        self.batch_last = 0.0
        self.retry_stuck = False
        """A node went away: stuck work is planned again (room under a limit)."""
        self.short_since: dict[str, float] = {}
        """Workload -> the first step, before its first admission, at which quota would have
        admitted it but no node had room (it was demand): under-provisioning."""
        self.unplaceable: dict[str, Keyed] = {}
        """Workload -> why no pool can run it (latest planning)."""
        self.plans: list[Plan] = []
        self.quota_blocked: dict[str, PendingReason] = {}
        """Pending workload -> the quota reason no node is launched for it."""

    def node_gone(self) -> None:
        """A node went away: room under the pools' limits, so stuck work is planned again."""
        if not self.retry_stuck:
            self.retry_stuck = True
            self.seen -= set(self.unplaceable)  # fresh again: a plan is made for them

    def provision(
        self, now: float, engine: Engine, snapshot: Snapshot, ran: set[str], out: Step
    ) -> Decision[None]:
        """Batch the demand for ``batch_idle_seconds`` (at most ``batch_max_seconds``) from
        its first fresh workload, then plan and launch for it; keep the headroom meanwhile."""
        demand = self._demand(now, engine, snapshot, ran)
        self.headroom.keep_warm(now, snapshot, demand, out)
        names = {d.workload.name for d in demand}
        fresh = names - self.seen
        self.seen &= names
        if not demand:
            self.batch_start = None
            if self.headroom.rooms() and self.headroom.shapes(free_room(snapshot, self.book)):
                yield from self._plan_and_launch(now, [], free_room(snapshot, self.book), out)
            return
        if fresh:
            self.seen |= fresh
            self.batch_last = now
            if self.batch_start is None:
                self.batch_start = now
        if self.batch_start is None:
            # nothing new since the last plan: those workloads wait for what it launched
            if self.headroom.warm_rooms and self.headroom.shapes(free_room(snapshot, self.book)):
                yield from self._plan_and_launch(now, [], free_room(snapshot, self.book), out)
            return
        settings = self.setup.settings
        due = min(
            self.batch_start + settings.batch_max_seconds,
            self.batch_last + settings.batch_idle_seconds,
        )
        if due > now:
            out.wake.append(due)
            return
        self.batch_start = None
        yield from self._plan_and_launch(now, demand, free_room(snapshot, self.book), out)

    def _demand(
        self, now: float, engine: Engine, snapshot: Snapshot, ran: set[str]
    ) -> list[Demand]:
        """Pending work quota would admit that no launching node is for
        (:func:`admissible_demand`); notes when each first was demand."""
        retry_at = self.launcher.retry_at
        if retry_at is not None and now >= retry_at:
            self.launcher.retry_at = None  # offerings that ran out of capacity are offered again
            self.seen.clear()
        waiting = {wl.name for wl in snapshot.pending}
        self.unplaceable = {w: r for w, r in self.unplaceable.items() if w in waiting}
        # Work no node can be bought for holds no quota on paper, so it does not block the
        # work behind it; it is tried again when a node goes away or a retry is due.
        stuck = set() if self.retry_stuck else set(self.unplaceable)
        demand, self.quota_blocked = admissible_demand(
            engine, snapshot, self.book.nominated(), stuck, self.states
        )
        for item in demand:
            name = item.workload.name
            if name not in ran and name not in self.short_since:
                self.short_since[name] = now
        return demand

    def _plan_and_launch(
        self, now: float, demand: Sequence[Demand], free: list[Room], out: Step
    ) -> Decision[None]:
        """Plan the pods that find no room in ``free`` and the missing headroom, and launch
        the plan; after a shortage, plan again what no launched node is for (at most
        :data:`MAX_REPLANS` plans)."""
        used: set[str] = set()
        wanted = shapes(demand, free, used)
        self._hold(used, now + self.setup.latency)
        wanted += self.headroom.shapes(free)
        if not wanted:
            return
        before = set(self.book.nodes)
        if self.retry_stuck:  # a fresh try for stuck work: what this plan leaves out is free
            self.retry_stuck = False
            tried = {w for shape in wanted for w in shape.workloads}
            self.unplaceable = {w: r for w, r in self.unplaceable.items() if w in tried}
        for _ in range(MAX_REPLANS):
            plan, planned = self._plan(now, wanted, out)
            allowed = self._allowed(plan, now, out)
            if not allowed:
                return
            failed = yield from self.launcher.launch(
                now, allowed, "provisioning", tuple(planned), out
            )
            launched = [self.book.nodes[n] for n in set(self.book.nodes) - before]
            if launched:  # the work waits for those nodes: its room stays nominated till then
                self._hold(used, max(m.ready_at for m in launched))
            if not failed:
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "plan",
                        "hourly_cost": round(plan.hourly_cost, 4),
                        "lower_bound": round(plan.lower_bound, 4),
                        "method": plan.method,
                        "workloads": len(planned),
                    }
                )
                return
            # some offerings had no capacity: the cloud marked them unavailable; re-plan what
            # the launched nodes do not cover (conservatively: everything not yet nominated)
            nominated = self.book.nominated()
            demand = [d for d in demand if d.workload.name not in nominated]
            wanted = shapes(demand, free) + self.headroom.shapes(free)
            if not wanted:
                return

    def _plan(self, now: float, wanted: list[PodShape], out: Step) -> tuple[Plan, list[str]]:
        """Plan nodes for ``wanted`` within the pools' current bounds and the account's
        limits; the plan and the workloads it plans for. What it cannot place is noted
        (``unplaceable``), with a wake-up when that is new (quota it held is free)."""
        setup = self.setup
        cloud = setup.cloud
        plan = plan_nodes(
            wanted,
            open_pools(setup.pools.values(), now, setup.settings.clock_start),
            setup.catalog,
            setup.offerings(now),
            pool_usage=self.book.usage(),
            time_limit=setup.settings.plan_time_limit_seconds,
            account_limits=cloud.traits.account,
            running_instances=cloud.instances(now),
        )
        self.plans.append(plan)
        planned = [
            w
            for i, s in enumerate(wanted)
            if i not in plan.unplaceable and not s.headroom
            for w in s.workloads
        ]
        for w in planned:
            self.unplaceable.pop(w, None)
        stuck = {
            w: reason
            for i, reason in plan.unplaceable.items()
            if not wanted[i].headroom
            for w in wanted[i].workloads
        }
        if stuck.keys() - self.unplaceable.keys():
            out.wake.append(now + max(1.0, setup.settings.batch_idle_seconds))  # free quota
        self.unplaceable.update(stuck)
        return plan, planned

    def _allowed(self, plan: Plan, now: float, out: Step) -> list[Launch]:
        """The plan's launches within the pools' limits and ceilings (logged when cut)."""
        allowed = self._within_limits(plan.launches, now)
        if len(allowed) < len(plan.launches) or any(
            a.count != b.count for a, b in zip(allowed, plan.launches, strict=False)
        ):
            out.log.append(
                {
                    "event": "autoscaler",
                    "action": "trimmed",
                    "reason": "the plan went past a pool limit or ceiling",
                }
            )
        return allowed

    def _hold(self, names: set[str], ready: float) -> None:
        """Nominate the nodes whose room pending work counts on: no voluntary disruption
        removes them, and consolidation moves no pod into their room, until ``ready`` (when
        the nodes launched with them are expected up) plus the pool's consolidate-after.
        Karpenter nominates the nodes a scheduling pass counts on and nominates them again at
        every pass while the pods wait (``Results.Record``: ``NominateNodeForPod``); its
        disruption skips a nominated node (``NewCandidate``: "state node is nominated for a
        pending pod"). Held only to the cloud's nominal latency, a Ready node a reclaimed gang
        counts on was removed as empty before the node it waits for came up
        (``launch_latency_by_type`` above the nominal latency), and bought again, for ever."""
        for name in names:
            managed = self.book.nodes.get(name)
            if managed is not None:
                after = self.setup.pools[managed.pool].disruption.consolidate_after_seconds
                managed.held_until = max(managed.held_until, ready + after)

    def _within_limits(self, launches: Sequence[Launch], now: float) -> list[Launch]:
        """The launches, cut where they would pass a pool's limits or ceiling (a last check
        before spending money, whatever the planner said)."""
        usage = self.book.usage()
        out = []
        for launch in launches:
            pool = self.setup.pools[launch.pool]
            ceiling = bounds(pool, now, self.setup.settings.clock_start)[1]
            capacity = self.setup.catalog.get(launch.instance_type).capacity
            mine = usage.setdefault(pool.name, {NODES: 0})
            count = 0
            for _ in range(launch.count):
                if ceiling is not None and mine[NODES] >= ceiling:
                    break
                if limit_passed(pool, mine, capacity) is not None:
                    break
                count += 1
                add_node(mine, capacity)
            if count:
                out.append(replace(launch, count=count))
        return out
