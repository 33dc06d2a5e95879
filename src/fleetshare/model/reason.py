"""Reasons as data: why a workload waits, why a node is kept, why no node is launched.

A :class:`Reason` carries a ``category`` (a short machine-readable word such as ``budget``,
``borrow-limit`` or ``pdb``), the human ``message`` shown to users, and the ``numbers`` the
message quotes, by name. Code branches on the category and compares numbers, never on text
parsed back out of a message; ``str(reason)`` is the message, so logs and reports read as
before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Reason:
    """Why something did not happen: a category, a message and the numbers it quotes."""

    category: str
    message: str
    numbers: Mapping[str, float] = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        """``{"category", "message", "numbers"}`` for machine-readable output."""
        return {"category": self.category, "message": self.message, "numbers": dict(self.numbers)}


def reason(category: str, message: str, **numbers: float) -> Reason:
    """Shorthand: ``reason("budget", "budget: 0 of 3 nodes may be disrupted", allowed=0)``."""
    return Reason(category, message, numbers)
