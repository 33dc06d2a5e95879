"""Reasons as data: why a workload waits, why a node is kept, why no node is launched.

A :class:`Reason` carries a ``category`` (a short machine-readable word such as ``budget``,
``borrow-limit`` or ``pdb``), the human ``message`` shown to users, and the ``numbers`` the
message quotes, by name. Code branches on the category and compares numbers, never on text
parsed back out of a message; ``str(reason)`` is the message, so logs and reports read as
before.

A pending workload's reason is a :class:`PendingReason`: the message itself (a ``str``, as
every reader of reasons had it) carrying a :data:`PendingCategory` set where the admission
cycle decides it, so that reasons are counted by kind (the service's
``fleetshare_pending_workloads_by_reason``) without reading a message, and its :data:`Gist`,
what it says without its amounts, set where it is composed, so that "the same reason with
other numbers" is found by comparing keys (``governance/queues.py`` ``new_in_substance``),
never by reading the message. What the autoscaler says of pending work (why no node can be
bought for it, why quota would not admit it) is a :class:`Keyed` message: a message with its
gist and no category (a :class:`PendingReason` is one), so that its note is new only when its
key is.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self, get_args


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


Gist = tuple[Hashable, ...]
"""What a pending reason says without its amounts: its kind (a word), then its non-numeric
subjects (team, flavor, resource, pod set, local queue, ...). Two reasons with equal keys
differ at most in their numbers (usage, counts, times) and in which other workload they name
(the one ahead, the one a reservation is for: who that is moves with the queue, as amounts
move with usage). A key made of other reasons' keys holds each whole (a tuple in the tuple).
"""

WORDS = "words"
"""The kind of the key of a reason given without one (read back from a store, made by hand):
its whole message, so it is the same only as the same words."""


class Keyed(str):
    """A message (this string) with its :data:`Gist` (``(WORDS, message)`` when not given):
    what the autoscaler says of pending work (why no node can be bought for it, why quota
    would not admit it), keyed where it is composed. Compares, hashes and serializes as the
    message."""

    gist: Gist

    def __new__(cls, message: str, gist: Gist | None = None) -> Self:
        made = super().__new__(cls, message)
        made.gist = (WORDS, message) if gist is None else gist
        return made

    def __reduce__(self) -> tuple[Any, ...]:  # pickled and copied with its gist
        return (Keyed, (str(self), self.gist))


class PendingReason(Keyed):
    """Why a workload waits: the message (this string), its :data:`PendingCategory` and its
    :data:`Gist` (``(WORDS, message)`` when not given). Compares, hashes and serializes as
    the message; :func:`~fleetshare.governance.queues.new_in_substance` compares gists."""

    category: PendingCategory

    def __new__(
        cls, message: str, category: PendingCategory, gist: Gist | None = None
    ) -> PendingReason:
        made = super().__new__(cls, message, gist)
        made.category = category
        return made

    def __reduce__(self) -> tuple[Any, ...]:  # pickled and copied with its category and gist
        return (PendingReason, (str(self), self.category, self.gist))

    def noted(self, note: str, gist: Gist) -> PendingReason:
        """The message with ``note`` (of key ``gist``) after it (``"; "``), of the same
        category; its key: ``("noted", self.gist, gist)``."""
        return PendingReason(f"{self}; {note}", self.category, ("noted", self.gist, gist))

    def wrapped(self, message: str, kind: str, *subjects: Hashable) -> PendingReason:
        """Another message for the same reason (a rewording, an addition) of the same
        category; its key: ``(kind, self.gist, *subjects)``."""
        return PendingReason(message, self.category, (kind, self.gist, *subjects))


def joined(problems: list[PendingReason]) -> PendingReason:
    """Several problems as one reason (each once, in order): the first one's category; its
    key: the one problem's, or ``("joined", *each problem's key)``."""
    unique = list(dict.fromkeys(problems))
    if len(unique) == 1:
        return unique[0]
    gist = ("joined", *(p.gist for p in unique))
    return PendingReason("; ".join(unique), unique[0].category, gist)
