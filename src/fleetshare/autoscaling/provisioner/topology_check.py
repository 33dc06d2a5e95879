"""Topology checks on the chosen packing: a zone spread that fell short in a zone is trimmed so
the skew stays at most 1, and a gang not placed in full is removed entirely.
"""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.provisioner.packing import Packing
from fleetshare.autoscaling.provisioner.problem import Problem
from fleetshare.autoscaling.provisioner.reasons import blocking_reason, gang_not_planned
from fleetshare.autoscaling.topology import spread_cap
from fleetshare.model.reason import Keyed

BLOCKED = Keyed("blocked", ("blocked",))
"""Why a zone of a spread cannot take its pods when no limit is found to block it."""

GANG_NOT_PLANNED = Keyed("not planned", ("gang-member-not-planned",))
"""Why a gang's member is short when no reason was found for it."""


def _item_coverage(p: Problem, covered: np.ndarray) -> np.ndarray:
    """Per item, how many of its pods the class coverage reaches (earlier items first)."""
    out = np.zeros(len(p.items), np.int64)
    for c, members in enumerate(p.class_items):
        left = int(covered[c])
        for k in members:
            out[k] = min(p.items[k].count, left)
            left -= out[k]
    return out


def enforce_topology(p: Problem, pack: Packing) -> tuple[dict[int, Keyed], np.ndarray]:
    """Trim zone spreads that fell short and drop gangs not placed in full.

    Returns, per shape with pods left out, why (limits that block more nodes, the spread, or
    the gang), worked out before anything is taken off; and how many pods of each item are
    planned in the end.
    """
    cover = _item_coverage(p, pack.covered())
    why: dict[int, Keyed] = {}
    for k, it in enumerate(p.items):
        if cover[k] < it.count and it.shape not in why:
            why[it.shape] = blocking_reason(p, pack, int(p.item_class[k]))
    removal = np.zeros(len(p.items), np.int64)
    by_shape: dict[int, list[int]] = {}
    for k, it in enumerate(p.items):
        by_shape.setdefault(it.shape, []).append(k)
    for s, ks in by_shape.items():
        shape = p.shapes[s]
        if not shape.zone_spread or all(cover[k] == p.items[k].count for k in ks):
            continue
        placed = dict.fromkeys(p.domains.get(s, []), 0)
        placed.update({str(p.items[k].zone): int(cover[k]) for k in ks})
        kept = spread_cap(placed, dict(shape.zone_counts))
        for k in ks:
            removal[k] = placed[str(p.items[k].zone)] - kept[str(p.items[k].zone)]
        short = [str(p.items[k].zone) for k in ks if cover[k] < p.items[k].count]
        cause = why.get(s, BLOCKED)
        why[s] = Keyed(
            f"zone spread (maxSkew 1): zone {', '.join(short)} cannot take all its pods "
            f"({cause}), so no zone may run more than one pod above the emptiest",
            ("zone-spread", tuple(short), cause.gist),
        )
    cover = cover - removal
    for gang in p.gangs:
        ks = [k for k, it in enumerate(p.items) if it.gang == gang]
        if all(cover[k] == p.items[k].count for k in ks):
            continue
        root = next(p.items[k].shape for k in ks if cover[k] < p.items[k].count)
        text = gang_not_planned(gang, root, why.get(root, GANG_NOT_PLANNED))
        for k in ks:
            removal[k] += cover[k]
            why[p.items[k].shape] = text
        cover[ks] = 0
    if removal.any():
        for c, members in enumerate(p.class_items):
            amount = int(removal[members].sum())
            if amount:
                pack.remove(c, amount)
        pack.right_size()
    return why, cover
