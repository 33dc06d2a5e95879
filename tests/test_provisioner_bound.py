"""The fluid LP's lower bound (``covering_dual_bound``) on hand-built cases: exact duals give
the optimum, any other duals never more than it, and a node-count row counts in full."""

from __future__ import annotations

import numpy as np

from fleetshare.autoscaling.provisioner.bound import covering_dual_bound

# one resource; candidates: a small node (4 units, $1) and a large one (10 units, $2)
OBJ = np.array([1.0, 2.0])
CAP = np.array([[4.0], [10.0]])
NO_ROWS = np.zeros((0, 2))
NONE = np.zeros(0)


def bound(u: float, prices: list[float], size: float = 1.0, demand: float = 10.0) -> float:
    fit = np.floor(CAP[:, 0] / size)[None, :]
    v = np.array([[[p], [p]] for p in prices])
    value, _ = covering_dual_bound(
        OBJ,
        CAP,
        np.array([[size]]),
        fit,
        np.array([demand]),
        np.array([u]),
        NO_ROWS,
        NONE,
        NONE,
        v,
    )
    return value


def test_the_lp_duals_give_the_optimum() -> None:
    # 10 one-unit pods: one large node ($2) is optimal; the LP prices a pod at $0.2
    assert np.isclose(bound(0.2, [0.2]), 2.0)


def test_no_duals_give_more_than_the_optimum() -> None:
    # duals too high are scaled down (Farley); a poor capacity price only weakens the bound
    for u in (0.05, 0.2, 0.3, 1.0, 5.0):
        for prices in ([0.0], [0.1], [0.2, 0.5], [1.0]):
            assert 0.0 <= bound(u, prices) <= 2.0 + 1e-12


def test_pods_that_fill_few_per_node_are_bounded_per_node() -> None:
    # pods of 3 units: the small node holds 1 ($1 a pod), the large one 3 ($0.67 a pod); 4
    # pods: the optimum is $3 (a large and a small node); the LP's ($2.67) is a valid bound
    value = bound(2.0 / 3.0, [2.0 / 9.0, 0.0], size=3.0, demand=4.0)
    assert np.isclose(value, 8.0 / 3.0)
    assert value <= 3.0


def test_a_node_count_row_counts_in_full() -> None:
    # 3 pods at most one per node: three small nodes, $3; the covering dual is 0 and the
    # node-count row (at least 3 nodes of either candidate) carries the bound
    value, ratio = covering_dual_bound(
        OBJ,
        CAP,
        np.array([[1.0]]),
        np.array([[1.0, 1.0]]),
        np.array([3.0]),
        np.array([0.0]),
        np.array([[1.0, 1.0]]),
        np.array([3.0]),
        np.array([1.0]),
        np.zeros((1, 2, 1)),
    )
    assert np.isclose(value, 3.0)
    assert np.allclose(ratio, [1.0, 0.5])
