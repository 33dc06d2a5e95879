"""Order statistics shared by every report: one definition of a percentile."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt


def nearest_rank(values: npt.NDArray[np.float64], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile: the ``ceil(q / 100 x n)``-th smallest of the
    ``n`` values (at least the smallest; infinities count as the largest; None when there
    are none)."""
    if values.size == 0:
        return None
    ordered = np.sort(values)
    return float(ordered[min(ordered.size - 1, max(0, math.ceil(q / 100 * ordered.size) - 1))])
