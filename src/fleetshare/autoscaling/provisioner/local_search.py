"""Local search on a packing: move a node to the next cheaper candidate (or empty it) when
the pods that no longer fit find room on other nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fleetshare.autoscaling.provisioner.budget import PlanBudget, SafetyNet
from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem


def _node_allowed(p: Problem, pack: Packing, n: int) -> np.ndarray:
    """Candidates every class on node ``n`` may use."""
    ids = np.unique(p.allowed_id[np.flatnonzero(pack.counts[n])])
    return np.asarray(p.allowed_rows[ids].all(axis=0))


def improve(p: Problem, pack: Packing, budget: PlanBudget, net: SafetyNet) -> int:
    """Local search: move a node to the next cheaper candidate (or empty it) when the pods
    that no longer fit can be re-homed in the spare room of the other nodes. Passes over the
    nodes, least utilised first, until one improves nothing or the budget
    (``search_passes``, ``search_moves``) is spent. Returns the moves tried."""
    L = p.limits.matrix
    norm = p.size / p.capref
    tried = 0
    for _ in range(budget.search_passes):
        improved = False
        pack.compact()
        closed = np.zeros(pack.n, bool)
        cap_now = p.cap[pack.cand[: pack.n]]
        util = (pack.used[: pack.n] / np.maximum(cap_now, 1)).max(axis=1)
        for n in np.argsort(util, kind="stable").tolist():
            if pack.counts[n].sum() == 0:
                continue
            if tried >= budget.search_moves or net.fired():
                return tried
            tried += 1
            cur = int(pack.cand[n])
            ok = _node_allowed(p, pack, n) & (p.obj < p.obj[cur] - 1e-12)
            if len(L):
                ok &= ((pack.head + L[:, cur])[:, None] + 1e-9 >= L).all(axis=0)
            for j in [*_targets(p, pack, n, ok, budget.search_targets), -1]:
                if _shrink(p, pack, n, j, norm, closed):
                    if j >= 0:
                        if len(L):
                            pack.head += L[:, cur] - L[:, j]
                        pack.cand[n] = j
                    else:
                        closed[n] = True
                    improved = True
                    break
        if not improved:
            break
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


def _shrink(
    p: Problem, pack: Packing, n: int, j: int, norm: np.ndarray, closed: np.ndarray
) -> bool:
    """Evict pods from node ``n`` until it fits candidate ``j`` (all of them when ``j`` is
    -1) and re-home them on other nodes; undone unless every pod finds a place. Two choices of
    pods to evict are tried: those using least of what the other nodes have spare per unit of
    the shortfall they clear, then simply the smallest."""
    present = np.flatnonzero(pack.counts[n])
    room = p.cap[pack.cand[: pack.n]] - pack.used[: pack.n]
    room[n] = 0
    room[closed[: pack.n]] = 0
    spare = np.maximum(room.sum(axis=0), 0)
    if j < 0:
        if (pack.used[n] > spare).any():
            return False
        return _rehome(p, pack, n, {int(c): int(pack.counts[n, c]) for c in present}, closed, norm)
    deficit0 = pack.used[n] - p.cap[j]
    short = deficit0 > 0
    sizes = p.size[present]
    cost = (sizes / np.maximum(spare, 1)).sum(axis=1)
    gain = (sizes[:, short] / np.maximum(deficit0[short], 1)).sum(axis=1)
    orders = [np.argsort(cost / np.maximum(gain, 1e-12), kind="stable")]
    orders.append(np.argsort(norm[present].sum(axis=1), kind="stable"))
    size_of = sizes.tolist()  # plain ints: this loop runs per class on the node
    count_of = pack.counts[n, present].tolist()
    for order in orders:
        deficit = deficit0.tolist()
        evict: dict[int, int] = {}
        for i in order.tolist():
            if all(d <= 0 for d in deficit):
                break
            size = size_of[i]
            ks = [-(-d // s) for d, s in zip(deficit, size, strict=True) if d > 0 and s > 0]
            if not ks:
                continue
            k = min(max(ks), count_of[i])
            evict[int(present[i])] = k
            deficit = [d - k * s for d, s in zip(deficit, size, strict=True)]
        if all(d <= 0 for d in deficit) and _rehome(p, pack, n, evict, closed, norm):
            return True
    return False


def _rehome(
    p: Problem,
    pack: Packing,
    n: int,
    evict: Mapping[int, int],
    closed: np.ndarray,
    norm: np.ndarray,
) -> bool:
    """Move ``evict`` (class -> pods) from node ``n`` to the fullest other nodes with room."""
    moves: list[tuple[int, np.ndarray]] = []
    others = ~closed[: pack.n]
    others[n] = False
    weight = norm[list(evict)].sum(axis=1).tolist() if evict else []
    by_weight = sorted(zip(evict.items(), weight, strict=True), key=lambda cw: -cw[1])
    for (c, k), _ in by_weight:
        size = p.size[c]
        nz = size > 0
        cand = pack.cand[: pack.n]
        free = p.cap[cand][:, nz] - pack.used[: pack.n][:, nz]
        q = np.floor_divide(free, size[nz]).min(axis=1)
        q = np.minimum(q, p.upper[c] - pack.counts[: pack.n, c])
        q = np.where(others & p.allowed[c, cand], np.maximum(q, 0), 0)
        if q.sum() < k:
            for c2, take in moves:
                pack.add(slice(0, pack.n), c2, -take)
            return False
        spare = ((p.cap[cand] - pack.used[: pack.n]) / p.capref).sum(axis=1)
        order = np.argsort(spare, kind="stable")  # best fit: fullest nodes first
        qo = q[order]
        take_o = np.clip(k - (np.cumsum(qo) - qo), 0, qo)
        take = np.zeros(pack.n, np.int64)
        take[order] = take_o
        pack.add(slice(0, pack.n), c, take)
        moves.append((c, take))
    for c, k in evict.items():
        pack.counts[n, c] -= k
        pack.used[n] -= k * p.size[c]
    return True
