"""The one small protocol every disruption method implements (Karpenter's ``Method``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fleetshare.autoscaling.disruption.state import State
from fleetshare.autoscaling.disruption.types import Action, Decision, NodeView, Validation
from fleetshare.model.reason import Reason


@dataclass
class Screening:
    """A method's candidates, in the order it considers them, and why each other node it looked
    at is not one."""

    candidates: list[NodeView] = field(default_factory=list)
    kept: dict[str, Reason] = field(default_factory=dict)


class Method(Protocol):
    """One way to disrupt nodes. Pure: everything comes from the :class:`State`.

    ``forced`` methods (repair, expiration) override do-not-disrupt and PDBs; voluntary ones
    never do. ``screen`` finds the candidates (with reasons for the rest); ``compute`` decides
    on them (the actions, and why candidates not acted on are kept); ``validate`` re-checks an
    action this method decided against a later state, before it is carried out."""

    name: str
    forced: bool

    def screen(self, state: State) -> Screening: ...

    def candidates(self, state: State) -> list[NodeView]: ...

    def compute(self, state: State, candidates: Sequence[NodeView]) -> Decision: ...

    def validate(self, state: State, action: Action) -> Validation: ...


class Base:
    """``candidates`` from ``screen`` (shared by the methods)."""

    def screen(self, state: State) -> Screening:
        raise NotImplementedError

    def candidates(self, state: State) -> list[NodeView]:
        """The nodes this method may act on now, in its order."""
        return self.screen(state).candidates
