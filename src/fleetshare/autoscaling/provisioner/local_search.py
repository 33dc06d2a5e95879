"""Local search on a packing: move a node to the next cheaper candidate (or empty it) when
the pods that no longer fit find room on other nodes, directly or by a swap (a pod of the
other node makes way, onto the moved node or a third one); when no move is left, exchange
pods between nodes with room in different resources (:func:`balance`) and search again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem


def _node_allowed(p: Problem, pack: Packing, n: int) -> np.ndarray:
    """Candidates every class on node ``n`` may use."""
    ids = np.unique(p.allowed_id[np.flatnonzero(pack.counts[n])])
    return np.asarray(p.allowed_rows[ids].all(axis=0))


@dataclass
class SwapBudget:
    """Work a local-search run may still spend on swaps (``left``, nodes x classes per swap),
    and at most ``per_move`` swaps per node move (a move needing more is not made)."""

    left: int
    per_move: int


def improve(p: Problem, pack: Packing, budget: PlanBudget, net: SafetyNet) -> int:
    """Local search: move a node to the next cheaper candidate (or empty it) when the pods
    that no longer fit can be re-homed in the spare room of the other nodes. Passes over the
    nodes, least utilised first: after one that improved, the next visits only the nodes it
    changed (moved, emptied, gave or took pods: where the next move is most likely), and
    after one of those that improved nothing, every node again. At a pass over every node
    that improves nothing, pods are exchanged between nodes with room in different resources
    (:func:`balance`, at most ``search_rebalances`` times, each with a new swap budget) and
    the passes go on from the nodes that exchanged; the search ends when there is nothing
    to exchange, or when the budget (``search_passes``, ``search_moves``; swaps:
    ``search_swap_work``, ``search_swaps_per_move``) is spent. Returns the moves tried."""
    swaps = SwapBudget(budget.search_swap_work, budget.search_swaps_per_move)
    norm = p.size / p.capref
    tried = 0
    rebalances = budget.search_rebalances
    dirty: np.ndarray | None = None  # nodes changed in the previous pass (None: all)
    for _ in range(budget.search_passes):
        improved = False
        if dirty is not None:
            dirty = dirty[: pack.n][pack.counts[: pack.n].sum(axis=1) > 0]
        pack.compact()
        closed = np.zeros(pack.n, bool)
        touched = np.zeros(pack.n, bool)
        cap_now = p.cap[pack.cand[: pack.n]]
        util = (pack.used[: pack.n] / np.maximum(cap_now, 1)).max(axis=1)
        order = np.argsort(util, kind="stable")
        if dirty is not None:
            order = order[dirty[order]]
        for n in order.tolist():
            if pack.counts[n].sum() == 0:
                continue
            if tried >= budget.search_moves or net.fired():
                return tried
            tried += 1
            cur = int(pack.cand[n])
            ok = _node_allowed(p, pack, n) & (p.obj < p.obj[cur] - 1e-12)
            ok &= pack.rooms(instead_of=cur) > 0
            spare = _spare(p, pack, n, closed)  # the same for every target: a failed try is undone
            for j in [*_targets(p, pack, n, ok, budget.search_targets), -1]:
                if _shrink(p, pack, n, j, norm, closed, swaps, touched, spare):
                    if j >= 0:
                        pack.move(n, j)
                    else:
                        closed[n] = True
                    improved = True
                    break
        if not improved and dirty is None:
            if rebalances <= 0 or not balance(p, pack, budget.search_balance_swaps, touched):
                break
            # the room the exchanges made may let nodes move: search again, with new swaps
            rebalances -= 1
            swaps = SwapBudget(budget.search_rebalance_swap_work, budget.search_swaps_per_move)
            improved = True
        dirty = touched if improved else None
    return tried


def _targets(p: Problem, pack: Packing, n: int, ok: np.ndarray, most: int) -> list[int]:
    """Cheaper candidates node ``n`` may move to, at most ``most``: the next cheaper one, then
    those its pods overflow least (summed over resources, relative to the largest capacity;
    ties: the dearer, then the lower index)."""
    idx = np.flatnonzero(ok)
    if not len(idx) or most <= 0:
        return []
    nxt = int(idx[np.argmax(p.obj[idx])])
    short = (np.maximum(pack.used[n][None, :] - p.cap[idx], 0) / p.capref).sum(axis=1)
    order = idx[np.lexsort((idx, -p.obj[idx], short))]
    out = [nxt] + [int(j) for j in order if j != nxt]
    return out[:most]


def _spare(p: Problem, pack: Packing, n: int, closed: np.ndarray) -> np.ndarray:
    """Room per resource summed over the open nodes other than ``n``."""
    room = p.cap[pack.cand[: pack.n]] - pack.used[: pack.n]
    room[n] = 0
    room[closed[: pack.n]] = 0
    return np.asarray(np.maximum(room.sum(axis=0), 0))


def _shrink(
    p: Problem,
    pack: Packing,
    n: int,
    j: int,
    norm: np.ndarray,
    closed: np.ndarray,
    swaps: SwapBudget,
    touched: np.ndarray,
    spare: np.ndarray,
) -> bool:
    """Evict pods from node ``n`` until it fits candidate ``j`` (all of them when ``j`` is
    -1) and re-home them on other nodes; undone unless every pod finds a place (then the
    nodes it changed are marked in ``touched``). ``spare``: the other open nodes' room
    (:func:`_spare`). Two choices of pods to evict are tried: those using least of what the
    other nodes have spare per unit of the shortfall they clear, then simply the smallest."""
    present = np.flatnonzero(pack.counts[n])
    if j < 0:
        if (pack.used[n] > spare).any():
            return False
        evict_all = {int(c): int(pack.counts[n, c]) for c in present}
        return _rehome(p, pack, n, evict_all, closed, norm, swaps, touched)
    deficit0 = pack.used[n] - p.cap[j]
    if (deficit0 > spare).any():  # the other nodes must take at least the deficit, swaps or not
        return False
    short = deficit0 > 0
    sizes = p.size[present]
    cost = (sizes / np.maximum(spare, 1)).sum(axis=1)
    gain = (sizes[:, short] / np.maximum(deficit0[short], 1)).sum(axis=1)
    orders = [np.argsort(cost / np.maximum(gain, 1e-12), kind="stable")]
    orders.append(np.argsort(norm[present].sum(axis=1), kind="stable"))
    counts = pack.counts[n, present]
    for order in orders:
        chosen = evictions(deficit0, sizes, counts, order)
        if chosen is None:
            continue
        evict = {int(present[i]): k for i, k in chosen}
        if _rehome(p, pack, n, evict, closed, norm, swaps, touched, j):
            return True
    return False


def evictions_plain(
    deficit: np.ndarray, sizes: np.ndarray, counts: np.ndarray, order: np.ndarray
) -> list[tuple[int, int]] | None:
    """The pods to evict so that ``deficit`` (per resource) is cleared: classes in ``order``
    (rows of ``sizes`` and ``counts``), each as many as clear what is left of the deficit in
    the resources it uses, at most all of them. Returns (row, pods) in order, or None when
    evicting everything does not clear it."""
    left = deficit.tolist()
    out: list[tuple[int, int]] = []
    for i in order.tolist():
        if max(left) <= 0:
            break
        size = sizes[i].tolist()
        ks = [-(-d // s) for d, s in zip(left, size, strict=True) if d > 0 and s > 0]
        if not ks:
            continue
        k = min(max(ks), int(counts[i]))
        out.append((i, k))
        left = [d - k * s for d, s in zip(left, size, strict=True)]
    return out if max(left) <= 0 else None


def evictions(
    deficit: np.ndarray, sizes: np.ndarray, counts: np.ndarray, order: np.ndarray
) -> list[tuple[int, int]] | None:
    """:func:`evictions_plain`, in arrays when every class uses every resource short (then
    each class in order goes whole until one clears the rest: the first whose whole count
    would)."""
    short = deficit > 0
    if not short.any():
        return []
    if not (sizes[:, short] > 0).all():
        return evictions_plain(deficit, sizes, counts, order)
    whole = counts[order, None] * sizes[order]  # what each class clears when it goes whole
    before = deficit[None, :] - (np.cumsum(whole, axis=0) - whole)  # the deficit it meets
    clears = (before - whole <= 0).all(axis=1)
    if not clears.any():
        return None
    t = int(np.argmax(clears))
    need = before[t] > 0
    last = int((-(-before[t][need] // sizes[order[t]][need])).max())
    chosen = [(int(i), int(counts[i])) for i in order[:t].tolist()]
    return [*chosen, (int(order[t]), last)]


def _rehome(
    p: Problem,
    pack: Packing,
    n: int,
    evict: Mapping[int, int],
    closed: np.ndarray,
    norm: np.ndarray,
    swaps: SwapBudget,
    touched: np.ndarray,
    j: int = -1,
) -> bool:
    """Move ``evict`` (class -> pods) from node ``n`` to the fullest other nodes with room;
    pods that find no room may swap (:func:`_swap`) with a pod of another node that then
    goes to node ``n`` as candidate ``j`` (or to a third node), within ``swaps``. Undone
    unless all move."""
    per_move = swaps.per_move
    journal: list[tuple[slice | np.ndarray, int, np.ndarray]] = []

    def add(rows: slice | np.ndarray, c: int, amounts: np.ndarray) -> None:
        pack.add(rows, c, amounts)
        journal.append((rows, c, amounts))

    def undo() -> bool:
        for rows, c, amounts in reversed(journal):
            pack.add(rows, c, -amounts)
        pack.counts[n, cls] += ks
        pack.used[n] += ks @ p.size[cls]
        return False

    others = ~closed[: pack.n]
    others[n] = False
    # off node n first: what swaps back must fit beside the pods that stay
    cls = np.fromiter(evict.keys(), np.int64, len(evict))
    ks = np.fromiter(evict.values(), np.int64, len(evict))
    pack.counts[n, cls] -= ks
    pack.used[n] -= ks @ p.size[cls]
    weight = norm[cls].sum(axis=1).tolist()
    by_weight = sorted(zip(evict.items(), weight, strict=True), key=lambda cw: -cw[1])
    cand = pack.cand[: pack.n]  # no node changes candidate here
    cap_now = p.cap[cand]
    work = pack.n * p.n_classes  # what one swap examines
    for (c, k), _ in by_weight:
        size = p.size[c]
        nz = size > 0
        room = cap_now - pack.used[: pack.n]
        q = np.floor_divide(room[:, nz], size[nz]).min(axis=1)
        q = np.minimum(q, p.upper[c] - pack.counts[: pack.n, c])
        q = np.where(others & p.allowed[c, cand], np.maximum(q, 0), 0)
        short = k - min(k, int(q.sum()))
        if short > min(per_move, swaps.left // work):  # more swaps than the budget allows
            return undo()
        spare = (room / p.capref).sum(axis=1)
        order = np.argsort(spare, kind="stable")  # best fit: fullest nodes first
        qo = q[order]
        take_o = np.minimum(np.maximum(k - (np.cumsum(qo) - qo), 0), qo)
        take = np.zeros(pack.n, np.int64)
        take[order] = take_o
        add(slice(0, pack.n), c, take)
        for _ in range(short):
            per_move -= 1
            swaps.left -= work
            swap = _swap(p, pack, n, j, c, others, cap_now)
            if swap is None:
                return undo()
            for m, c2, delta in swap:
                add(np.array([m]), c2, np.array([delta]))
    touched[n] = True
    for rows, _, amounts in journal:
        touched[rows] |= amounts != 0
    return True


def _swap(
    p: Problem,
    pack: Packing,
    n: int,
    j: int,
    c: int,
    others: np.ndarray,
    cap_now: np.ndarray | None = None,
) -> list[tuple[int, int, int]] | None:
    """Room for one pod of class ``c`` (off node ``n``) by a swap: on another node ``m`` it
    takes the place of one pod of class ``c2`` that moves to node ``n`` (as candidate ``j``;
    not when ``n`` is being emptied) or to a third node with room. Classes keep to their
    allowed candidates (zones, pools) and per-node caps. Returns the changes (node, class,
    +-1) or None; the first that works, nodes fullest first, then classes in index order.
    ``cap_now``: each node's capacity (``p.cap`` of its candidate), when the caller has it."""
    cand = pack.cand[: pack.n]
    used = pack.used[: pack.n]
    counts = pack.counts[: pack.n]
    room = (p.cap[cand] if cap_now is None else cap_now) - used
    short = np.maximum(p.size[c][None, :] - room, 0)  # what each node lacks for one c
    hosts = others & p.allowed[c, cand] & (counts[:, c] < p.upper[c]) & short.any(axis=1)
    if not hosts.any():
        return None
    # out[c2, m]: one pod of c2 leaving host m makes room for c there (per resource: the
    # arrays are classes x nodes)
    on = np.flatnonzero(counts[hosts].any(axis=0))
    on = on[on != c]
    out = (counts[:, on].T > 0) & hosts[None, :]
    for r in np.flatnonzero(short.any(axis=0)).tolist():
        out &= p.size[on, r][:, None] >= short[:, r][None, :]
    keep = out.any(axis=1)
    if not keep.any():
        return None
    on, out = on[keep], out[keep]
    size2 = p.size[on]
    below = p.upper[on][:, None] > counts[:, on].T  # room under the per-node cap
    to_n = np.zeros(len(on), bool)
    if j >= 0:
        to_n = p.allowed[on, j] & below[:, n] & (used[n][None, :] + size2 <= p.cap[j]).all(axis=1)
    # dest[c2, m3]: a third node with room for one c2 (not the host it leaves)
    dest = others[None, :] & p.allowed[on][:, cand] & below
    for r in range(room.shape[1]):
        dest &= room[:, r][None, :] >= size2[:, r][:, None]
    n_dest = dest.sum(axis=1)
    ok = out & (to_n[:, None] | (n_dest[:, None] - dest > 0))
    if not ok.any():
        return None
    spare = (room / p.capref).sum(axis=1)
    ms = np.flatnonzero(ok.any(axis=0))
    m = int(ms[np.argsort(spare[ms], kind="stable")[0]])  # the fullest host
    i = int(np.flatnonzero(ok[:, m])[0])
    c2 = int(on[i])
    if to_n[i]:
        return [(m, c2, -1), (n, c2, 1), (m, c, 1)]
    d = dest[i].copy()
    d[m] = False
    m3 = int(np.flatnonzero(d)[np.argmin(spare[d])])  # the fullest with room
    return [(m, c2, -1), (m3, c2, 1), (m, c, 1)]


def balance(p: Problem, pack: Packing, most: int, touched: np.ndarray) -> int:
    """Exchange pods one for one between a node with room only in CPU and one with room only
    in memory when that raises the sum of the two nodes' smaller room (relative to the
    largest capacity): room in one resource alone holds no pod, and the exchanges turn it
    into room a pod can use, for the moves that follow. The cost does not change. Pairs: each
    of the ``BALANCE_NODES`` nodes with most CPU room over memory room with each of the
    ``BALANCE_NODES`` with most memory room over CPU room; every pair exchanges while that
    helps, and the sweep repeats while it exchanged anything, at most ``most`` exchanges in
    all. Classes keep to their allowed candidates (zones, pools) and per-node caps; a host
    bundle moves whole (it is one unit of its class). Marks the nodes changed in ``touched``;
    returns the exchanges made."""
    done = 0
    if "cpu" not in p.resources or "memory" not in p.resources:
        return 0
    two = [p.resources.index("cpu"), p.resources.index("memory")]
    one = np.ones(1, np.int64)
    while done < most:
        cand = pack.cand[: pack.n]
        room = (p.cap[cand][:, two] - pack.used[: pack.n][:, two]) / p.capref[two]
        lean = room[:, 0] - room[:, 1]  # > 0: CPU room to spare, < 0: memory room
        cpu = np.argsort(-lean, kind="stable")[:BALANCE_NODES]
        mem = np.argsort(lean, kind="stable")[:BALANCE_NODES]
        cpu, mem = cpu[lean[cpu] > 0], mem[lean[mem] < 0]
        before = done
        for a in cpu.tolist():
            for b in mem.tolist():
                while done < most:
                    pair = _exchange(p, pack, a, b, two)
                    if pair is None:
                        break
                    x, y = pair
                    pack.add(np.array([a]), x, -one)
                    pack.add(np.array([b]), x, one)
                    pack.add(np.array([b]), y, -one)
                    pack.add(np.array([a]), y, one)
                    touched[[a, b]] = True
                    done += 1
        if done == before:
            break
    return done


BALANCE_NODES = 12
""":func:`balance`: nodes on each side (CPU room, memory room) whose pairs exchange."""


def _exchange(p: Problem, pack: Packing, a: int, b: int, two: list[int]) -> tuple[int, int] | None:
    """The best exchange of one pod of class ``x`` on node ``a`` for one of class ``y`` on
    node ``b`` (both fit, allowed candidates, per-node caps): the one that raises the sum of
    the two nodes' smaller room (CPU, memory) most, or None when none raises it."""
    ca, cb = int(pack.cand[a]), int(pack.cand[b])
    xs = np.flatnonzero(pack.counts[a])
    ys = np.flatnonzero(pack.counts[b])
    xs = xs[p.allowed[xs, cb] & (pack.counts[b, xs] < p.upper[xs])]
    ys = ys[p.allowed[ys, ca] & (pack.counts[a, ys] < p.upper[ys])]
    if not len(xs) or not len(ys):
        return None
    sx, sy = p.size[xs][:, None, :], p.size[ys][None, :, :]
    left_a = p.cap[ca] - (pack.used[a] - sx + sy)  # x-by-y room left on a after the exchange
    left_b = p.cap[cb] - (pack.used[b] - sy + sx)
    fits = (left_a >= 0).all(axis=2) & (left_b >= 0).all(axis=2) & (xs[:, None] != ys[None, :])
    if not fits.any():
        return None
    ref = p.capref[two]
    now = ((p.cap[ca] - pack.used[a])[two] / ref).min() + (
        (p.cap[cb] - pack.used[b])[two] / ref
    ).min()
    after = (left_a[:, :, two] / ref).min(axis=2) + (left_b[:, :, two] / ref).min(axis=2)
    gain = np.where(fits, after - now, -np.inf)
    i, k = np.unravel_index(int(np.argmax(gain)), gain.shape)
    if gain[i, k] <= 1e-9:
        return None
    return int(xs[i]), int(ys[k])
