"""The starvation guard: long-waiting workloads reserve what they need.

A workload pending longer than ``starvation_guard_seconds`` that does not fit now (but could
fit in an empty cluster) holds back later work (lower priority, or equal and submitted later,
in queue order) that competes for the
same (flavor, resource) pairs: its own team's work always; anyone's *borrowing* work too, unless
the workload waits on its own team's quota or limits (then holding others back cannot help).
Work within another team's own quota is never held back.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass, field

from fleetshare.governance.quota import FR
from fleetshare.governance.state import amount
from fleetshare.model.workload import Workload


@dataclass(slots=True, eq=False)
class Reservation:
    """A starving workload's claim on the pairs it needs."""

    workload: Workload
    usage: dict[FR, int]
    team_only: bool
    active: bool = field(default=True)
    key: tuple[int, float, str] = field(init=False)
    """The workload's place in queue order."""

    def __post_init__(self) -> None:
        self.key = _key(self.workload)


class Reservations:
    """Active reservations, indexed by the pairs they hold."""

    def __init__(self) -> None:
        self._by_name: dict[str, Reservation] = {}
        self._shared: dict[FR, list[Reservation]] = {}
        self._team: dict[tuple[str, FR], list[Reservation]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def add(self, res: Reservation) -> None:
        """Reserve (once per workload)."""
        if res.workload.name in self._by_name:
            return
        self._by_name[res.workload.name] = res
        for fr in res.usage:  # each list in queue order
            insort(self._team.setdefault((res.workload.team, fr), []), res, key=_res_key)
            if not res.team_only:
                insort(self._shared.setdefault(fr, []), res, key=_res_key)

    def release(self, name: str) -> None:
        """The workload was admitted: its claim ends."""
        res = self._by_name.pop(name, None)
        if res is not None:
            res.active = False

    def held_by(self, wl: Workload, usage: dict[FR, int], within_quota: bool) -> Reservation | None:
        """The reservation that holds ``wl`` back, if any (the first in queue order, so the
        answer does not depend on the order reservations were made in)."""
        mine = _key(wl)
        best: Reservation | None = None
        for fr, value in usage.items():
            if value <= 0:
                continue
            lists = [self._team.get((wl.team, fr), [])]
            if not within_quota:
                lists.append(self._shared.get(fr, []))
            for candidates in lists:
                for res in candidates:  # the first active one is the earliest of the list
                    if res.key >= mine or (best is not None and res.key >= best.key):
                        break
                    if res.active:
                        best = res
                        break
        return best


def _res_key(res: Reservation) -> tuple[int, float, str]:
    return res.key


def _key(wl: Workload) -> tuple[int, float, str]:
    """Queue order (priority, then FIFO): only later work is held back, so two starving
    workloads never hold each other."""
    return (-wl.priority, wl.submit_time, wl.name)


def held_message(res: Reservation, usage: dict[FR, int], now: float) -> str:
    """Why a workload waits behind a reservation."""
    other = res.workload
    shared = sorted(usage.keys() & res.usage.keys())
    needs = ", ".join(amount(fr, res.usage[fr]) for fr in shared)
    return (
        f"held back for {other.name} (pending {now - other.submit_time:.0f}s), which needs "
        f"{needs} on {shared[0][0]} first (starvation guard)"
    )
