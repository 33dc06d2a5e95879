"""A budget of optional writes: what the operator writes besides admissions and evictions
(pending reasons, Team status) spends from a token bucket, so that at any scale these
writes take a bounded share of the client's requests.

Time is the loop's clock (``now`` of the reconcile), not measured inside: the budget is a
pure function of the times it is asked at.
"""

from __future__ import annotations


class WriteBudget:
    """``burst`` writes at once, ``rate`` per second on average."""

    def __init__(self, rate: float, burst: int) -> None:
        if rate < 0 or burst < 0:
            raise ValueError(f"write budget: rate {rate} and burst {burst} must be >= 0")
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self._at: float | None = None

    def refill(self, now: float) -> None:
        """Add what the time since the last refill earned (capped at ``burst``)."""
        if self._at is not None and now > self._at:
            self.tokens = min(float(self.burst), self.tokens + (now - self._at) * self.rate)
        self._at = now if self._at is None else max(self._at, now)

    def take(self) -> bool:
        """Spend one write if the budget has one."""
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def next_at(self) -> float | None:
        """When the next write is affordable (None: never, with rate 0)."""
        if self.tokens >= 1:
            return self._at
        if self.rate <= 0 or self._at is None:
            return None
        return self._at + (1 - self.tokens) / self.rate
