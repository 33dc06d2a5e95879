"""The admission cycle's entry point: which pending workloads to admit, where, and whom to
preempt.

``Engine(policy, catalog).cycle(snapshot)`` runs one cycle and returns a
:class:`~fleetshare.governance.snapshot.CycleResult`; a :class:`CycleCache` carries work over
between the cycles of one run. The cycle itself is in ``cycle.py`` (the loop: every pending
workload once, in merge order), with ``ordering.py`` (the merge order and its key-order fast
path), ``flavors.py`` (flavor options and their quota standing), ``starvation.py`` (the
starvation guard) and ``preemption.py``.

Speed. The decisions are what the plain algorithm (``Engine.shortcuts = False``: every
pending workload tried in full, in the heap order, nothing carried) computes; the shortcuts
(shape failures, the key-order fast path, carried preemption searches) must agree with it.
With a ``CycleCache`` (a runner's), the state of nodes and running work and the grouping of
pending work are updated from the previous snapshot instead of rebuilt, and the pending result
is built on demand (``PendingMap``), with the list of reasons that changed.
"""

from __future__ import annotations

from fleetshare.governance.cycle import Carry, Cycle
from fleetshare.governance.queues import PendingIndex, PendingMap
from fleetshare.governance.queues import queue_key as queue_key
from fleetshare.governance.quota import QuotaModel, compile_policy, govern_nodes
from fleetshare.governance.snapshot import CycleResult, Snapshot
from fleetshare.governance.state import StateCache
from fleetshare.model.catalog import Catalog
from fleetshare.policy.schema import Policy


class Engine:
    """Governance for one policy: call :meth:`cycle` with a snapshot, get decisions back."""

    def __init__(self, policy: Policy, catalog: Catalog | None = None) -> None:
        self.policy = policy
        self.catalog = catalog
        self.model: QuotaModel = compile_policy(policy, catalog)
        self._governed_nodes: object = None
        """The node tuple :func:`govern_nodes` last looked at (the same tuple: the same
        nodes, as the state cache reads it too)."""
        self.cache: CycleCache | None = None
        """Used by :meth:`cycle` when it is given none (a runner sets one for its run)."""
        self.shortcuts = True
        """False: try every pending workload in full, in the heap loop, with no carried
        search results: the plain algorithm the shortcuts must agree with (for tests)."""

    def cycle(self, snapshot: Snapshot, cache: CycleCache | None = None) -> CycleResult:
        """Run one admission cycle; the snapshot is not modified.

        ``cache`` (default :attr:`cache`) carries work over between the cycles of one run
        (consecutive snapshots of a replay); the decisions are the same with or without it.
        Without one, ``result.pending`` is a plain dictionary; with one it is a
        :class:`~fleetshare.governance.queues.PendingMap` built on demand, and
        ``result.pending_changed`` lists the workloads whose reason differs from the previous
        cycle run with that cache.
        """
        cache = cache if cache is not None else self.cache
        nodes = snapshot.nodes
        if nodes is not self._governed_nodes or not isinstance(nodes, tuple):
            self.model = govern_nodes(self.model, self.policy, self.catalog, nodes)
            self._governed_nodes = nodes
        if cache is None:
            result = Cycle(self.model, self.policy, snapshot, CycleCache(), self.shortcuts).run()
            if isinstance(result.pending, PendingMap):
                result.pending = result.pending.materialize()
            result.pending_changed = None
            return result
        return Cycle(self.model, self.policy, snapshot, cache, self.shortcuts).run()


class CycleCache:
    """What one run's cycles may reuse from each other (see :meth:`Engine.cycle`): the state
    the last snapshot's nodes and running work give, and its pending work grouped by shape.

    Use one per sequence of snapshots (one runner, cycles applied in order); it follows policy
    and node changes by itself.
    """

    def __init__(self) -> None:
        self.state = StateCache()
        self.pending = PendingIndex()
        self.carry: Carry | None = None
        """What the last cycle leaves to the next one at the same moment."""
