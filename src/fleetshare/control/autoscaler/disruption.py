"""Disruption orchestration (Karpenter's ``disruption/`` controller and queue): repair and
emptiness at every step; every ``disruption_interval_seconds``, one expiry, drift or
consolidation action from :mod:`fleetshare.autoscaling.disruption` (the methods, one per
module), a consolidation re-validated before it is carried out, replacements launched first
and the old nodes removed once those are Ready."""

from __future__ import annotations

from collections.abc import Mapping

from fleetshare.autoscaling.disruption import (
    DRIFT,
    EMPTINESS,
    EXPIRATION,
    MULTI_NODE,
    REPAIR,
    SINGLE_NODE,
    Action,
    decide,
    validate,
)
from fleetshare.autoscaling.provisioner import Launch
from fleetshare.control.autoscaler.disruption_views import DisruptionViews
from fleetshare.control.autoscaler.headroom import Headroom
from fleetshare.control.autoscaler.launching import Decision, Launcher
from fleetshare.control.autoscaler.step import Moment, Step, removal
from fleetshare.model.reason import Reason

REPLACE_GRACE = 60.0
"""Seconds a Ready replacement is kept even if empty, for the pods it was bought for."""

VOLUNTARY = (EXPIRATION, DRIFT, MULTI_NODE, SINGLE_NODE)
"""The disruption methods walked every ``disruption_interval_seconds`` (repair and emptiness,
cheap and urgent, are walked at every step)."""
TIME_BOUND = frozenset({"consolidate-after", "budget", "floor", "nominated"})
"""Reasons to keep a node that lapse with time alone: the next pass must look again."""
ANNOUNCED = frozenset({"training", "do-not-disrupt", "pdb", "budget"})
"""Reasons to keep a node that are logged (once per node and reason)."""
WAITED = {
    "consolidate-after": ("after", "waited"),
    "repair-grace": ("grace", "waited"),
}
"""Reasons that end after a known wait: (the wait, the time waited so far)."""

CONSOLIDATION_KINDS = frozenset({"delete", "replace"})


def action_removal(action: Action) -> Reason:
    """A disruption action's removal reason: its kind (delete and replace are consolidation)
    and its text, e.g. ``replace: consolidation: replace node-3 (...) with ...``."""
    category = "consolidation" if action.kind in CONSOLIDATION_KINDS else action.kind
    return Reason(category, f"{action.kind}: {action.reason}")


def _due(now: float, reasons: Mapping[str, Reason]) -> list[float]:
    """When the nodes kept for a reason that lapses with time may be looked at again."""
    out = []
    for reason in reasons.values():
        numbers = reason.numbers
        if reason.category == "nominated" and "left" in numbers:
            out.append(now + numbers["left"])
        elif reason.category in WAITED:
            wait, waited = WAITED[reason.category]
            if wait in numbers and waited in numbers:
                out.append(now + numbers[wait] - numbers[waited])
    return out


class Disruptor:
    """Removes nodes: unhealthy ones, empty ones, and one voluntary action at a time."""

    def __init__(self, views: DisruptionViews, headroom: Headroom, launcher: Launcher) -> None:
        self.views = views
        self.headroom = headroom
        self.launcher = launcher
        self.book = launcher.book
        self.setup = launcher.setup
        self.proposed: tuple[Action, float] | None = None
        """A disruption decided earlier, carried out after re-validation at the given time."""
        self.replacing: list[tuple[Action, tuple[str, ...]]] = []
        """Actions whose replacements are launching: old nodes go once those are Ready."""
        self.next_disruption = 0.0
        self.last_signature: object = None
        """The nodes, their pods and the nodes disrupting at the last voluntary pass."""
        self.announced: dict[str, str] = {}
        self.blocked: dict[str, Reason] = {}
        """Node -> why the latest voluntary disruption pass kept it."""

    def kept(self, name: str, reason: Reason) -> None:
        """The backend could not remove ``name``: the next pass looks at it again."""
        self.blocked[name] = reason
        self.last_signature = None

    def _disrupting(self, removing: set[str]) -> set[str]:
        """Nodes being disrupted: removed this step, or replaced once their replacements are
        Ready."""
        return removing | {n for action, _ in self.replacing for n in action.nodes}

    def _announce(
        self, reasons: Mapping[str, Reason], categories: frozenset[str], action: str, out: Step
    ) -> None:
        """Log why each node was kept, for the reasons of ``categories``, once per node and
        reason."""
        for node, reason in sorted(reasons.items()):
            if reason.category in categories and self.announced.get(node) != str(reason):
                self.announced[node] = str(reason)
                out.log.append(
                    {"event": "autoscaler", "action": action, "node": node, "reason": str(reason)}
                )

    def repair(self, at: Moment, out: Step) -> None:
        """Unhealthy nodes go after the repair grace (:data:`REPAIR`, whose one rule pauses a
        pool where too many nodes are unhealthy at once); their work was requeued when they
        failed and provisioning replaces the capacity it needs."""
        if not any(m.joined and m.unhealthy_since is not None for m in self.book.live()):
            return  # no unhealthy node: nothing to repair (and no snapshot to build)
        removing = out.removing()
        state = self.views.state(at, removing, removing, offerings=False)
        decision = decide(state, (REPAIR,))
        for action in decision.actions:
            out.removals.extend((name, removal("repair", action.reason)) for name in action.nodes)
        self._announce(decision.reasons, frozenset({"repair-halted"}), "repair-paused", out)
        out.wake.extend(_due(at.now, decision.reasons))

    def emptiness(self, at: Moment, out: Step) -> None:
        """Nodes empty for their pool's consolidate-after go (:data:`EMPTINESS`: down to the
        floor, within budgets, not annotated do-not-disrupt, not nominated), at every step; a
        node the configured headroom still needs stays."""
        if not any(m.joined and not m.pods_seen for m in self.book.live()):
            return  # no empty node: nothing to remove (and no snapshot to build)
        removing = out.removing()
        state = self.views.state(at, removing, self._disrupting(removing), offerings=False)
        decision = decide(state, (EMPTINESS,))
        removed = False
        needed: set[tuple[str, ...]] = set()
        """Kinds of empty node the headroom needs: another of the same kind is needed too
        (taking more nodes away never makes room), so it is not checked again."""
        for action in decision.actions:
            for name in action.nodes:
                managed = self.book.nodes[name]
                inst = managed.instance
                kind = (managed.pool, inst.instance_type, inst.zone, inst.capacity_type)
                if kind in needed:
                    continue
                if self.headroom.kept_without(name, removing, at.running.values()):
                    out.removals.append((name, removal("empty")))
                    removing.add(name)
                    removed = True
                else:
                    needed.add(kind)
        budget_bound = any(r.category == "budget" for r in decision.reasons.values())
        out.again = out.again or (removed and budget_bound)
        out.wake.extend(_due(at.now, decision.reasons))

    def disrupt(self, at: Moment, out: Step) -> Decision[None]:
        """Carry out a re-validated proposal; otherwise, every ``disruption_interval_seconds``,
        walk expiration, drift, multi-node and single-node consolidation (:data:`VOLUNTARY`)
        for the next action (one at a time, as Karpenter does). Expiry and drift are acted on
        at once; a consolidation is proposed and re-validated ``disruption_validation_seconds``
        later."""
        now = at.now
        removing = out.removing()
        disrupting = self._disrupting(removing)
        if self.proposed is not None:
            yield from self._revalidate(at, removing, disrupting, out)
            return
        if self.replacing or now < self.next_disruption:
            if not self.replacing:
                out.wake_if_busy.append(self.next_disruption)
            return
        settings = self.setup.settings
        self.next_disruption = now + settings.disruption_interval_seconds
        action = self._next_action(at, removing, disrupting, out)
        if action is None:
            return
        if action.kind in ("expire", "drift"):
            yield from self._act(now, action, out)  # forced by time, not a judgement on the moment
            return
        if not self.headroom.kept_without(
            action.nodes[0], removing | set(action.nodes), at.running.values()
        ):
            keep = Reason("headroom", "headroom: keeps the warm room")
            self.blocked.update(dict.fromkeys(action.nodes, keep))
            return
        due = now + settings.disruption_validation_seconds
        self.proposed = (action, due)
        out.wake_if_busy.append(due)

    def _revalidate(
        self, at: Moment, removing: set[str], disrupting: set[str], out: Step
    ) -> Decision[None]:
        """Once its validation time has come, carry out the proposed action if it still
        holds (:func:`validate`), else drop it."""
        assert self.proposed is not None
        action, due = self.proposed
        if due > at.now:
            out.wake_if_busy.append(due)
            return
        self.proposed = None
        state = self.views.state(at, removing, disrupting - set(action.nodes))
        check = validate(state, action)
        if not check.valid:
            out.log.append({"event": "autoscaler", "action": "cancelled", "reason": check.reason})
            return
        yield from self._act(at.now, action, out)

    def _next_action(
        self, at: Moment, removing: set[str], disrupting: set[str], out: Step
    ) -> Action | None:
        """The next voluntary action (:func:`decide` over :data:`VOLUNTARY`), unless nothing
        changed since a pass that found nothing to do; why each node was kept is noted."""
        if not any(m.joined and m.name not in removing for m in self.book.live()):
            return None
        signature = (
            frozenset((m.name, m.pods_seen) for m in self.book.live()),
            frozenset(disrupting),
        )
        time_bound = any(r.category in TIME_BOUND for r in self.blocked.values())
        if signature == self.last_signature and not time_bound and not self._expiring():
            return None  # nothing changed since a pass that found nothing to do
        self.last_signature = signature
        state = self.views.state(at, removing, disrupting)
        decision = decide(state, VOLUNTARY)
        self._announce(decision.reasons, ANNOUNCED, "kept", out)
        self.blocked = dict(decision.reasons)
        out.wake_if_busy.append(self.next_disruption)
        return decision.actions[0] if decision.actions else None

    def _expiring(self) -> bool:
        return any(p.disruption.expire_after_seconds is not None for p in self.setup.pools.values())

    def _act(self, now: float, action: Action, out: Step) -> Decision[None]:
        """Carry out an action: remove its nodes, or launch its replacements first (the old
        nodes go once those are Ready)."""
        out.log.append(
            {
                "event": "autoscaler",
                "action": action.kind,
                "nodes": list(action.nodes),
                "saving_per_hour": round(action.saving_per_hour, 4),
                "reason": action.reason,
            }
        )
        if not action.replacements:
            for name in action.nodes:
                out.removals.append((name, action_removal(action)))
            return
        before = set(self.book.nodes)
        launches = [
            Launch(r.pool, r.instance_type, r.zone, r.capacity_type, r.count, r.price_per_hour)
            for r in action.replacements
        ]
        why = f"{action.kind} of {', '.join(action.nodes)}"
        yield from self.launcher.launch(now, launches, why, (), out)
        new = tuple(sorted(set(self.book.nodes) - before))
        if new:
            self.replacing.append((action, new))

    def finish_replacements(self, now: float, out: Step) -> None:
        """Replacements all Ready: hold them for the moved pods and remove the old nodes; a
        lost replacement cancels its action."""
        waiting = []
        for action, new in self.replacing:
            launched = [self.book.nodes[n] for n in new]
            if any(m.terminated_at is not None for m in launched):
                out.log.append(
                    {
                        "event": "autoscaler",
                        "action": "cancelled",
                        "reason": f"a replacement for {', '.join(action.nodes)} was lost",
                    }
                )
                continue
            if all(m.joined for m in launched):
                for managed in launched:  # the moved pods land there: not "empty" meanwhile
                    after = self.setup.pools[managed.pool].disruption.consolidate_after_seconds
                    managed.held_until = max(managed.held_until, now + max(after, REPLACE_GRACE))
                for name in action.nodes:
                    node = self.book.nodes.get(name)
                    if node is not None and node.terminated_at is None:
                        out.removals.append((name, action_removal(action)))
                continue
            waiting.append((action, new))
        self.replacing = waiting
