"""Greedy plans: classes in one of four orders, put on the open nodes (first fit, or shared
evenly) and new nodes opened by price per pod or capacity per dollar; gangs not placed in full
are left out.
"""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem


def _order(p: Problem, classes: np.ndarray, rule: str) -> list[int]:
    weight = (p.size / p.capref).sum(axis=1)
    capped = p.upper < p.demand
    if rule == "spread":  # capped, then the largest batches
        key = np.lexsort((-weight[classes], -p.demand[classes], ~capped[classes]))
    elif rule == "balance":  # the most constrained, then capped, then the largest batches
        choices = p.allowed[classes].sum(axis=1)
        key = np.lexsort((-weight[classes], -p.demand[classes], ~capped[classes], choices))
    elif rule == "big":
        key = np.lexsort((-weight[classes], -p.accel[classes], ~capped[classes]))
    else:
        key = np.lexsort((-weight[classes], -p.accel[classes]))
    return [int(c) for c in classes[key]]


def even_shares(q: np.ndarray, left: int, load: np.ndarray) -> np.ndarray:
    """Share ``left`` pods over nodes taking at most ``q`` each, as evenly as possible (the
    least loaded nodes get the odd ones)."""
    if q.sum() <= left:
        return q.copy()
    lo, hi = 0, int(q.max())
    while lo < hi:  # largest t with sum(min(q, t)) <= left
        mid = (lo + hi + 1) // 2
        if np.minimum(q, mid).sum() <= left:
            lo = mid
        else:
            hi = mid - 1
    take: np.ndarray = np.minimum(q, lo)
    rest = left - int(take.sum())
    if rest:
        room = np.flatnonzero(q > take)
        take[room[np.argsort(load[room], kind="stable")[:rest]]] += 1
    return take


def fill(p: Problem, pack: Packing, need: np.ndarray, rule: str, open_new: bool = True) -> None:
    """Put ``need`` pods per class on the open nodes (first fit, or shared evenly for the
    ``spread`` rule), opening new nodes as needed (unless ``open_new`` is false); ``need`` is
    reduced by what is placed."""
    capw = (p.cap / p.capref).sum(axis=1)
    for c in _order(p, np.flatnonzero(need > 0), rule):
        left = int(need[c])
        size = p.size[c]
        nz = size > 0
        if pack.n:
            cand = pack.cand[: pack.n]
            free = p.cap[cand][:, nz] - pack.used[: pack.n][:, nz]
            q = np.floor_divide(free, size[nz]).min(axis=1)
            q = np.minimum(q, p.upper[c] - pack.counts[: pack.n, c])
            q = np.where(p.allowed[c, cand], np.maximum(q, 0), 0)
            if rule == "spread":
                # equal shares; the odd pods where their own resources are least used
                load = (pack.used[: pack.n] / p.capref) @ (size / p.capref)
                take = even_shares(q, left, load)
            elif rule == "balance":
                # shares in proportion to the room left for what the pod uses (dot product)
                room = (p.cap[cand] - pack.used[: pack.n]) / p.capref
                w = np.where(q > 0, np.maximum(room @ (size / p.capref), 0), 0)
                share = np.zeros_like(q)
                if left < q.sum() and w.sum() > 0:
                    share = np.minimum(q, np.floor(left * w / w.sum()).astype(np.int64))
                take = share + even_shares(q - share, left - int(share.sum()), -w)
            else:
                before = np.cumsum(q) - q
                take = np.clip(left - before, 0, q)
            if take.any():
                pack.add(slice(0, pack.n), c, take)
                left -= int(take.sum())
        need[c] = left
        while left > 0 and open_new:
            per = p.fit[c]
            room = pack.rooms()
            ok = (per > 0) & (room > 0)
            if not ok.any():
                break
            if rule != "pod":
                score = np.where(ok, p.obj / np.maximum(capw, 1e-12), np.inf)
                j = int(np.lexsort((-capw, score))[0])
            else:
                score = np.where(ok, p.obj / np.minimum(left, np.maximum(per, 1)), np.inf)
                j = int(np.lexsort((-per, score))[0])
            rows = pack.open(j, min(-(-left // int(per[j])), int(room[j])))
            k = rows.stop - rows.start
            if rule in ("spread", "balance"):
                amounts = even_shares(np.full(k, int(per[j]), np.int64), left, np.zeros(k))
            else:
                amounts = np.full(k, int(per[j]), np.int64)
                amounts[-1] = min(int(per[j]), left - int(per[j]) * (k - 1))
                amounts = np.maximum(amounts, 0)
            pack.add(rows, c, amounts)
            left -= int(amounts.sum())
            need[c] = left


def greedy(p: Problem, rule: str, start: Packing | None = None) -> Packing:
    """The greedy plan; gangs it cannot place in full are left out (and the rest redone)."""
    excluded: set[int] = set()
    while True:
        pack = start if start is not None else Packing(p)
        need = p.demand - (pack.covered() if start is not None else 0)
        need = np.maximum(need, 0)
        for g in excluded:
            need[p.class_gang == g] = 0
        fill(p, pack, need, rule)
        short = p.demand - pack.covered()
        broken = {int(g) for g in np.unique(p.class_gang[short > 0]) if g >= 0} - excluded
        if not broken or start is not None:
            pack.right_size()
            return pack
        excluded |= broken
