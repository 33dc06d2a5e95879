"""Reclaim node by node: the lender's guarantee in placement, not only in quota.

Reclaim takes borrowers' work in candidate order (lowest priority, newest first), each only
while its team still borrows, as Kueue does. That gives a lender its quota back, but when the
borrowed work is spread thinly over nodes it may leave no node with room for a pod that needs
most of one (an 8-GPU pod on 8-GPU nodes): the free GPUs are scattered, and the team stopped
borrowing before a node was cleared. Then reclaim goes node by node instead:

- on each node holding candidates, the best set of them: the one that lets the node hold the
  most of the preemptor's pods (at most all of them), then throws away the least work (each
  victim's contested resources times the time it has run), then has the fewest victims,
  then comes first in candidate order; a set is legal when each victim is taken while its
  team still borrows a contested pair it uses, its team's victims taken smallest first (the
  order that lets the most go: the largest, taken last, may take the team below its quota,
  as in Kueue);
- the node whose best set ranks first (most pods, least work lost, fewest victims, node
  order) gives up that set, and the others' sets are found again (their teams may borrow
  less now), until the preemptor fits; otherwise nothing is taken.

The sets are exact up to :data:`EXACT` candidates on a node (every subset is tried), larger
first beyond that. The caller minimises the victims.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

from fleetshare.governance.quota import FR
from fleetshare.governance.state import Admitted, CycleState
from fleetshare.model.workload import Workload

EXACT = 10
"""Candidates on one node up to which every subset is tried."""

Fits = Callable[[], bool]


def defragment(
    state: CycleState,
    wl: Workload,
    contested: set[FR],
    candidates: Sequence[Admitted],
    fits: Fits,
) -> list[Admitted] | None:
    """Victims, already removed from ``state``, that let ``wl`` fit; None (state unchanged)
    when reclaim node by node cannot make room."""
    fit = state.fit
    columns = {fr: fit.resources[fr[1]] for fr in contested if fr[1] in fit.resources}
    per_pod = {
        fr: need
        for fr in columns
        if (need := max((ps.requests.get(fr[1], 0) for ps in wl.podsets), default=0)) > 0
    }
    if not per_pod:
        return None
    on_node: dict[int, dict[int, dict[FR, int]]] = {}  # node -> candidate index -> usage there
    for k, entry in enumerate(candidates):
        for podset, pairs in zip(entry.podsets, entry.plan, strict=False):
            for node, count in pairs:
                here = on_node.setdefault(node, {}).setdefault(k, {})
                for fr in per_pod:
                    here[fr] = here.get(fr, 0) + podset.requests.get(fr[1], 0) * count

    def pods(node: int, freed: dict[FR, int]) -> int:
        return min(
            (int(fit.free[node, columns[fr]]) + freed.get(fr, 0)) // need
            for fr, need in per_pod.items()
        )

    def lost(k: int) -> float:  # the work evicting it throws away
        entry = candidates[k]
        held = sum(entry.usage.get(fr, 0) for fr in per_pod)
        return held * max(0.0, state.now - entry.admitted_at)

    wanted = sum(ps.count for ps in wl.podsets)
    taken: list[Admitted] = []
    left = set(on_node)
    while left:
        best: tuple[tuple[int, float, int, int], list[int]] | None = None
        for node in sorted(left):
            found = _best_set(state, contested, candidates, on_node[node], wanted, pods, lost, node)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            break
        node = best[0][3]
        left.discard(node)
        for k in best[1]:
            state.remove(candidates[k])
            taken.append(candidates[k])
        if fits():
            return taken
    for entry in reversed(taken):
        state.restore(entry)
    return None


def _best_set(
    state: CycleState,
    contested: set[FR],
    candidates: Sequence[Admitted],
    here: dict[int, dict[FR, int]],
    wanted: int,
    pods: Callable[[int, dict[FR, int]], int],
    lost: Callable[[int], float],
    node: int,
) -> tuple[tuple[int, float, int, int], list[int]] | None:
    """The legal set of candidates on ``node`` that adds the most of the preemptor's pods (up
    to ``wanted``), then throws away the least work, then has the fewest victims, then comes
    first in candidate order: its rank ``(-pods added, work lost, victims, node)`` and its
    indices in the order they are to be taken; None if no set adds a pod."""
    now = pods(node, {})
    keys = sorted(here)  # candidate order
    sets: Iterable[tuple[int, ...]]
    if len(keys) > EXACT:  # the largest first, one more at a time
        keys.sort(key=lambda k: -sum(here[k].values()))
        sets = (tuple(keys[:n]) for n in range(1, len(keys) + 1))
    else:
        sets = itertools.chain.from_iterable(
            itertools.combinations(keys, size) for size in range(1, len(keys) + 1)
        )
    best: tuple[tuple[int, float, int, int], list[int]] | None = None
    for subset in sets:
        freed: dict[FR, int] = {}
        for k in subset:
            for fr, v in here[k].items():
                freed[fr] = freed.get(fr, 0) + v
        got = min(pods(node, freed), now + wanted) - now
        if got <= 0:
            continue
        rank = (-got, sum(lost(k) for k in subset), len(subset), node)
        if best is not None and rank >= best[0]:
            continue
        order = _legal_order(state, contested, [candidates[k] for k in subset], list(subset))
        if order is not None:
            best = (rank, order)
    return best


def _legal_order(
    state: CycleState, contested: set[FR], entries: list[Admitted], keys: list[int]
) -> list[int] | None:
    """``keys`` in the order to take them (each team's smallest first), or None when some
    victim would be taken after its team stopped borrowing what it uses of ``contested``."""
    tree = state.tree
    gone: dict[str, dict[FR, int]] = {}
    order = sorted(
        range(len(entries)),
        key=lambda i: (
            entries[i].workload.team,
            sum(entries[i].usage.get(fr, 0) for fr in contested),
            keys[i],
        ),
    )
    for i in order:
        entry = entries[i]
        team = entry.workload.team
        mine = gone.setdefault(team, {})
        if entry.removed or not tree.borrows(team, contested & entry.usage.keys(), mine):
            return None
        for fr, v in entry.usage.items():
            mine[fr] = mine.get(fr, 0) + v
    return [keys[i] for i in order]
