"""The names of the placement policies (how admitted pods are put on nodes and GPUs).

Defined here, below both the policy schema and the placement code, so that the two share
one list; what each policy does is described in :mod:`fleetshare.placement.fit`.
"""

from __future__ import annotations

from typing import Literal, get_args

Placement = Literal["default", "first_fit", "best_fit", "fgd"]

PLACEMENTS: tuple[str, ...] = get_args(Placement)
