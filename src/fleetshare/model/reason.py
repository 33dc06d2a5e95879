"""Reasons as data: why a workload waits, why a node is kept, why no node is launched.

A :class:`Reason` carries a ``category`` (a short machine-readable word such as ``budget``,
``borrow-limit`` or ``pdb``), the human ``message`` shown to users, and the ``numbers`` the
message quotes, by name. Code branches on the category and compares numbers, never on text
parsed back out of a message; ``str(reason)`` is the message, so logs and reports read as
before.

A pending workload's reason is a :class:`PendingReason`: the message itself (a ``str``, as
every reader of reasons had it) carrying a :data:`PendingCategory` set where the admission
cycle decides it, so that reasons are counted by kind (the service's
``fleetshare_pending_workloads_by_reason``) without reading a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args


@dataclass(frozen=True, slots=True)
class Reason:
    """Why something did not happen: a category, a message and the numbers it quotes."""

    category: str
    message: str
    numbers: Mapping[str, float] = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        return self.message

    @property
    def details(self) -> str:
        """The message when it says more than the category, else ``""`` (an eviction's
        message beside its reason)."""
        return "" if self.message == self.category else self.message

    def to_json(self) -> dict[str, Any]:
        """``{"category", "message", "numbers"}`` for machine-readable output."""
        return {"category": self.category, "message": self.message, "numbers": dict(self.numbers)}


def reason(category: str, message: str, **numbers: float) -> Reason:
    """Shorthand: ``reason("budget", "budget: 0 of 3 nodes may be disrupted", allowed=0)``."""
    return Reason(category, message, numbers)


PendingCategory = Literal[
    "quota", "capacity", "too-large", "no-node", "refused", "held-back", "queued", "unknown"
]
"""What kind of reason keeps a workload pending (a fixed set: a metric label), set by the
branch of the admission cycle that leaves it pending:

- ``quota``: its team's quota and borrowing rules do not allow it now (the quota is used and it
  may not borrow, or not as much: a borrowing limit, nothing idle in the cohort), and no
  preemption makes room;
- ``capacity``: quota allows it, but the Ready, schedulable nodes have no room for its pods
  now, and no preemption makes room;
- ``too-large``: a pod of it is larger than every node it may use (it waits for larger nodes);
- ``no-node``: no Ready, schedulable node admits it at all (labels, affinity, taints, topology;
  or no nodes);
- ``refused``: its team's rules refuse it whatever quota and nodes say: no quota policy, the
  quota disabled, the team or its local queue stopped, a namespace the team does not admit, a
  resource the team does not cover;
- ``held-back``: the starvation guard keeps what it needs for a workload waiting longer;
- ``queued``: it waits behind work ahead of it in its team's queue (a StrictFIFO head that
  cannot be admitted; or room freed in this cycle after work ahead was tried, for the next);
- ``unknown``: logged by a version of fleetshare before reasons had categories (a service's
  older store; never the engine's).

A reason made of several options' problems (``"; "``-joined) has the category of the first."""

PENDING_CATEGORIES: tuple[PendingCategory, ...] = get_args(PendingCategory)


class PendingReason(str):
    """Why a workload waits: the message (this string) and its :data:`PendingCategory`.
    Compares, hashes and serializes as the message."""

    category: PendingCategory

    def __new__(cls, message: str, category: PendingCategory) -> PendingReason:
        made = super().__new__(cls, message)
        made.category = category
        return made

    def __reduce__(self) -> tuple[Any, ...]:  # pickled and copied with its category
        return (PendingReason, (str(self), self.category))

    def noted(self, note: str) -> PendingReason:
        """The message with ``note`` after it (``"; "``), of the same category."""
        return PendingReason(f"{self}; {note}", self.category)

    def wrapped(self, message: str) -> PendingReason:
        """Another message for the same reason (a rewording, an addition)."""
        return PendingReason(message, self.category)


def joined(problems: list[PendingReason]) -> PendingReason:
    """Several problems as one reason (each once, in order): the first one's category."""
    return PendingReason("; ".join(dict.fromkeys(problems)), problems[0].category)
