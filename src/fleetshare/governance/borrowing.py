"""The borrowing arithmetic of one node of the quota tree, per (flavor, resource): each
formula once, for the tree (:mod:`.tree`), the cycle's quota questions (:mod:`.state`) and
the starvation guard (:mod:`.starvation`). Kueue keeps the same pair, ``available`` and
``potentialAvailable``, side by side in pkg/cache/scheduler/resource_node.go.

Names: ``subtree`` is the node's own quota plus what its children lend up, ``kept`` what it
keeps from its parent (its lending limit), ``usage`` what it holds, ``limit`` its absolute
borrowing limit (None: none), ``percent`` its percent-of-idle limit (None: none).
"""

from __future__ import annotations

from fleetshare.governance.quota import FR
from fleetshare.model.quantity import format_quantity
from fleetshare.model.reason import PendingReason


def most_held(subtree: int, limit: int | None) -> int | None:
    """The most a node may hold under its absolute borrowing limit: ``subtree + limit``
    (None without a limit)."""
    return None if limit is None else subtree + limit


def available(usage: int, subtree: int, kept: int, parent: int, limit: int | None) -> int:
    """What a node may still take (Kueue's ``available``), ``parent`` being its parent's:
    ``max(0, kept - usage) + max(0, min(parent, most_held - kept - max(0, usage - kept)))``,
    without the ``min`` when there is no borrowing limit."""
    from_parent = parent
    most = most_held(subtree, limit)
    if most is not None:
        from_parent = min(from_parent, most - kept - max(0, usage - kept))
    return max(0, kept - usage) + max(0, from_parent)


def potential_available(subtree: int, kept: int, parent: int, limit: int | None) -> int:
    """What a node could take with nothing used (Kueue's ``potentialAvailable``), ``parent``
    being its parent's: ``min(kept + parent, most_held)``, without the ``min`` when there is
    no borrowing limit."""
    most = most_held(subtree, limit)
    return kept + parent if most is None else min(kept + parent, most)


def idle_limit(idle: int, percent: float) -> int:
    """The percent-of-idle borrowing limit: ``floor(int(idle * percent) / 100)``, ``idle``
    being the team's idle pool (``QuotaTree.idle_for``)."""
    return int(idle * percent) // 100


def ceiling(quota: int, usage: int, limit: int | None, by_idle: int | None) -> float:
    """How much more a team may take under its own borrowing limits, whatever others do
    (``by_idle``: its :func:`idle_limit`, None without one):
    ``max(quota - usage, min(most_held - usage, quota - usage + by_idle))``, each term of the
    ``min`` only where its limit is set (infinite with neither)."""
    headroom = quota - usage
    out = float("inf")
    most = most_held(quota, limit)
    if most is not None:
        out = most - usage
    if by_idle is not None:
        out = min(out, headroom + by_idle)
    return max(out, float(headroom))


def limit_message(fr: FR, borrow: int, limit: int, why: str, origin: str) -> PendingReason:
    """Why a request is refused by a borrowing limit (``why``: the limit's origin in words,
    ``origin`` in a word: ``limit`` for a set limit, ``idle`` for percent of idle); a
    ``quota`` reason keyed ``("borrow-limit", flavor, resource, origin)``."""
    q, res = format_quantity, fr[1]
    return PendingReason(
        f"borrow limit for {res} on {fr[0]}: would borrow {q(borrow, res)}, limit "
        f"{q(limit, res)} ({why})",
        "quota",
        ("borrow-limit", fr[0], res, origin),
    )
