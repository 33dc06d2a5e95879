"""The quota tree: guaranteed quota, lending and borrowing, per (flavor, resource).

Teams are leaves; groups (cohorts) are inner nodes; the cluster is the root. With idle
resource sharing on, the root holds the *unallocated* capacity (capacity minus all quotas)
as quota of its own, so it is borrowable like lent quota.

For a node ``n`` and a (flavor, resource) pair:

- ``subtree(n)`` = own quota + what its children lend up (their subtree minus what they keep).
- ``kept(n)`` = ``max(0, subtree(n) - lending_limit(n))`` when a lending limit is set, else 0:
  the part of ``n``'s quota its parent never sees.
- ``usage(n)`` = a team's admitted requests; for a group, what its children use beyond kept.
- ``available(n)`` = what ``n`` may still take: ``max(0, kept - usage)`` locally plus what
  its parent has available, the latter capped by ``n``'s borrowing limit (the formulas:
  :mod:`.borrowing`).

This is Kueue's resource-node arithmetic; on top of it, the percent-of-idle limit compares a
team's borrowing with the *idle pool*: unallocated capacity plus every other team's unused,
lendable quota.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from fleetshare.governance import borrowing
from fleetshare.governance.quota import FR, QuotaModel

ROOT = ""


class _Node:
    __slots__ = (
        "borrowing_limit",
        "children",
        "is_team",
        "lending_limit",
        "name",
        "parent",
        "quota",
        "subtree",
    )

    def __init__(self, name: str, parent: _Node | None, is_team: bool) -> None:
        self.name = name
        self.parent = parent
        self.is_team = is_team
        self.children: list[_Node] = []
        self.quota: dict[FR, int] = {}
        self.subtree: dict[FR, int] = {}
        self.borrowing_limit: dict[FR, int] = {}
        self.lending_limit: dict[FR, int] = {}

    def kept(self, fr: FR) -> int:
        limit = self.lending_limit.get(fr)
        return 0 if limit is None else max(0, self.subtree.get(fr, 0) - limit)


class QuotaTree:
    """Mutable usage over a :class:`QuotaModel` for one admission cycle.

    The nodes (quotas, limits, subtree sums) never change after construction; usage is kept
    apart, per node name, so that :meth:`fork` is a cheap copy of the usage alone.
    """

    def __init__(self, model: QuotaModel, capacity: Mapping[FR, int], idle_sharing: bool) -> None:
        self.model = model
        self.capacity = dict(capacity)
        self._nodes: dict[str, _Node] = {ROOT: _Node(ROOT, None, False)}
        self._available: dict[tuple[str, FR], int] = {}
        for name in model.nodes:
            self._build(name)
        self._usage: dict[str, dict[FR, int]] = {name: {} for name in self._nodes}
        self._teams_under: dict[str, frozenset[str]] = {}
        self.touched: set[str] = set()
        """Nodes whose usage changed highest up, per :meth:`add` since last cleared (for
        callers: only teams under them may see their available quota change)."""
        self.lendable_changed = False
        """Set when :meth:`add` changed a team's lendable unused quota (the idle pool)."""
        allocated: dict[FR, int] = {}
        for qn in model.nodes.values():
            for fr, amount in qn.quota.items():
                allocated[fr] = allocated.get(fr, 0) + amount
        self.allocated = allocated
        self.unallocated = {
            fr: max(0, self.capacity.get(fr, 0) - allocated.get(fr, 0)) for fr in model.governed
        }
        root = self._nodes[ROOT]
        if idle_sharing:
            root.quota = dict(self.unallocated)
        self._subtree(root)
        self._group_quota: dict[FR, int] = {}
        for qn in model.nodes.values():
            if not qn.is_team:
                for fr, amount in qn.quota.items():
                    self._group_quota[fr] = self._group_quota.get(fr, 0) + amount
        self._idle_sharing = idle_sharing
        self._could_lend: dict[str, dict[str, int]] = {}
        """Per node, what it could lend a child at most, per resource (static: see
        :meth:`could_lend`)."""
        self._lendable: dict[FR, int] = {}
        for qn in model.nodes.values():
            if qn.is_team:
                for fr in qn.quota:
                    self._lendable[fr] = self._lendable.get(fr, 0) + self._lendable_unused(
                        qn.name, fr
                    )

    def fork(self) -> QuotaTree:
        """An independent copy: the static nodes are shared, the usage is copied."""
        new = object.__new__(QuotaTree)
        new.model = self.model
        new.capacity = self.capacity
        new._nodes = self._nodes
        new._available = {}
        new._usage = {name: usage.copy() for name, usage in self._usage.items()}
        new.allocated = self.allocated
        new.unallocated = self.unallocated
        new._group_quota = self._group_quota
        new._idle_sharing = self._idle_sharing
        new._lendable = self._lendable.copy()
        new._could_lend = self._could_lend
        new._teams_under = self._teams_under
        new.touched = set()
        new.lendable_changed = False
        return new

    def teams_under(self, name: str) -> frozenset[str]:
        """The teams in ``name``'s subtree (itself, if a team)."""
        found = self._teams_under.get(name)
        if found is None:
            node = self._nodes[name]
            out = {name} if node.is_team else set()
            for child in node.children:
                out |= self.teams_under(child.name)
            found = self._teams_under[name] = frozenset(out)
        return found

    def _build(self, name: str) -> _Node:
        if name in self._nodes:
            return self._nodes[name]
        qn = self.model.nodes[name]
        parent = self._build(qn.parent) if qn.parent is not None else self._nodes[ROOT]
        node = _Node(name, parent, qn.is_team)
        node.quota = dict(qn.quota)
        node.borrowing_limit = {fr: lim.amount for fr, lim in qn.borrowing_limit.items()}
        node.lending_limit = dict(qn.lending_limit)
        parent.children.append(node)
        self._nodes[name] = node
        return node

    def _subtree(self, node: _Node) -> None:
        subtree = dict(node.quota)
        for child in node.children:
            self._subtree(child)
            for fr, amount in child.subtree.items():
                subtree[fr] = subtree.get(fr, 0) + amount - child.kept(fr)
        node.subtree = subtree

    # -- reading ---------------------------------------------------------------------------

    def quota(self, team: str, fr: FR) -> int:
        """A team's guaranteed quota."""
        return self._nodes[team].quota.get(fr, 0)

    def usage(self, team: str, fr: FR) -> int:
        """What a team's admitted work requests."""
        return self._usage[team].get(fr, 0)

    def within_quota(self, team: str, request: Mapping[FR, int], governed: Collection[FR]) -> bool:
        """Does ``request`` stay inside the team's own quota, on every governed pair?"""
        used = self._usage[team]
        quota = self._nodes[team].quota
        for fr, value in request.items():
            if value > 0 and fr in governed and used.get(fr, 0) + value > quota.get(fr, 0):
                return False
        return True

    def borrows(self, team: str, frs: Collection[FR], gone: Mapping[FR, int] | None = None) -> bool:
        """Is the team above its own quota on any of ``frs``, once ``gone`` (usage chosen to
        be evicted) is taken off? Preemption takes another team's work only while this holds
        (Kueue: a candidate's ClusterQueue must still be borrowing)."""
        used = self._usage[team]
        quota = self._nodes[team].quota
        gone = gone or {}
        return any(used.get(fr, 0) - gone.get(fr, 0) > quota.get(fr, 0) for fr in frs)

    def borrowed(self, team: str, fr: FR) -> int:
        """How far a team is above its own quota."""
        node = self._nodes[team]
        return max(0, self._usage[team].get(fr, 0) - node.subtree.get(fr, 0))

    def available(self, name: str, fr: FR) -> int:
        """What ``name`` may still take of ``fr``, counting lent and borrowable quota."""
        key = (name, fr)
        cached = self._available.get(key)  # until usage changes
        if cached is None:
            cached = self._available[key] = self._compute_available(self._nodes[name], fr)
        return cached

    def _compute_available(self, node: _Node, fr: FR) -> int:
        usage = self._usage[node.name].get(fr, 0)
        if node.parent is None:
            return node.subtree.get(fr, 0) - usage
        return borrowing.available(
            usage,
            node.subtree.get(fr, 0),
            node.kept(fr),
            self.available(node.parent.name, fr),
            node.borrowing_limit.get(fr),
        )

    def node_usage(self, name: str, fr: FR) -> int:
        """What a team's admitted work requests, or a group's children use beyond what they
        keep (its usage in the tree)."""
        return self._usage[name].get(fr, 0)

    def subtree_quota(self, name: str, fr: FR) -> int:
        """A team's quota, or a group's own quota plus what its children lend up."""
        return self._nodes[name].subtree.get(fr, 0)

    def quota_frs(self, name: str) -> list[FR]:
        """The pairs a node has subtree quota or usage of."""
        return list({*self._nodes[name].subtree, *self._usage[name]})

    def parent_of(self, name: str) -> str | None:
        """A node's parent (the cluster root's name, ``""``, for a top-level one)."""
        parent = self._nodes[name].parent
        return None if parent is None else parent.name

    def could_lend(self, name: str) -> dict[str, int]:
        """The most node ``name`` could give a child, per resource (summed over flavors),
        counting only quotas and limits, not usage: what Kueue's fair sharing divides a
        child's borrowing by (its potential available: the root's subtree quota; below, what
        the node keeps plus what its parent could give it, within its borrowing limit)."""
        found = self._could_lend.get(name)
        if found is None:
            node = self._nodes[name]
            found = {}
            for fr in self.model.governed:
                found[fr[1]] = found.get(fr[1], 0) + self._potential(node, fr)
            self._could_lend[name] = found
        return found

    def _potential(self, node: _Node, fr: FR) -> int:
        if node.parent is None:
            return node.subtree.get(fr, 0)
        return borrowing.potential_available(
            node.subtree.get(fr, 0),
            node.kept(fr),
            self._potential(node.parent, fr),
            node.borrowing_limit.get(fr),
        )

    def pool_available(self, fr: FR) -> int:
        """What the cluster root still has to lend."""
        return self.available(ROOT, fr)

    def lendable_pool(self, fr: FR) -> int:
        """Everything borrowable in the cluster: the root's subtree quota (fair-share base)."""
        return self._nodes[ROOT].subtree.get(fr, 0)

    def used_frs(self, team: str) -> list[FR]:
        """The (flavor, resource) pairs a team has usage on."""
        return [fr for fr, value in self._usage[team].items() if value > 0]

    def idle_for(self, team: str, fr: FR) -> int:
        """The idle pool a team's percent-of-idle limit refers to.

        Unallocated capacity (with idle resource sharing on), group quota, and the unused,
        lendable quota of every *other* team.
        """
        own = self._lendable_unused(team, fr) if fr in self._nodes[team].quota else 0
        base = self.unallocated.get(fr, 0) if self._idle_sharing else 0
        return base + self._group_quota.get(fr, 0) + self._lendable.get(fr, 0) - own

    def _lendable_unused(self, team: str, fr: FR) -> int:
        node = self._nodes[team]
        unused = max(0, node.quota.get(fr, 0) - self._usage[team].get(fr, 0))
        limit = node.lending_limit.get(fr)
        return unused if limit is None else min(unused, limit)

    # -- writing ---------------------------------------------------------------------------

    def add(self, team: str, request: Mapping[FR, int], sign: int = 1) -> None:
        """Add (``sign=1``) or remove (``-1``) a team's usage, propagating to its ancestors."""
        leaf = self._nodes[team]
        self._available.clear()
        for fr, amount in request.items():
            if fr not in self.model.governed:
                continue
            tracked = fr in leaf.quota
            if tracked:
                self._lendable[fr] -= self._lendable_unused(team, fr)
            node: _Node | None = leaf
            delta = sign * amount
            top = leaf
            while node is not None and delta:
                usage = self._usage[node.name]
                before = usage.get(fr, 0)
                after = before + delta
                usage[fr] = after
                kept = node.kept(fr)
                delta = max(0, after - kept) - max(0, before - kept)
                top = node
                node = node.parent
            self.touched.add(top.name)
            if tracked:
                self.lendable_changed = True
                self._lendable[fr] += self._lendable_unused(team, fr)
