"""The control loop's clock, injected: virtual time in simulation, the wall clock live.

Decisions never read a clock themselves; the loop passes ``now`` down.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the loop's epoch."""

    def now(self) -> float:
        """The current time."""
        ...


class VirtualClock:
    """A clock that moves only when told (the simulator's event queue moves it)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        """Move to ``t``; time never goes back."""
        if t < self._now:
            raise ValueError(f"the clock cannot go back from {self._now:g} to {t:g}")
        self._now = t


class WallClock:
    """Real seconds since the clock was made, plus ``start`` (for ``fleetshare serve`` and the
    operator: a service restarted on its store starts at the time its epoch gives, so times
    it stored before go on counting)."""

    def __init__(self, start: float = 0.0) -> None:
        self._origin = time.monotonic() - start

    def now(self) -> float:
        return time.monotonic() - self._origin
