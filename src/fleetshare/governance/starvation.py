"""The starvation guard: long-waiting workloads reserve what they need.

A workload pending longer than ``starvation_guard_seconds`` that does not fit now (but could
fit in an empty cluster) holds back later work (lower priority, or equal and submitted later,
in queue order) that competes for the
same (flavor, resource) pairs: its own team's work always; anyone's *borrowing* work too, unless
the workload waits on its own team's quota or limits (then holding others back cannot help).
Work within another team's own quota is never held back.

:class:`StarvationGuard` applies this in one cycle: before the cycle every starving workload
that does not fit reserves (so the order in which the cycle meets workloads cannot let later
work slip past it), the cycle asks it whom the reservations hold back, and a starving workload
that fails reserves when the cycle meets it.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetshare.governance import borrowing
from fleetshare.governance.flavors import SHORT, Flavors, Option
from fleetshare.governance.queues import QueueKey, Shape, queue_key
from fleetshare.governance.quota import FR, QuotaModel
from fleetshare.governance.state import CycleState, amount
from fleetshare.model.namespace import NamespaceLabels
from fleetshare.model.reason import PendingReason
from fleetshare.model.workload import Workload
from fleetshare.placement.fit import NoFit


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


def held_message(res: Reservation, usage: dict[FR, int], now: float, team: str) -> PendingReason:
    """Why a workload of ``team`` waits behind a reservation (a ``held-back`` reason keyed
    by whose the reservation is, its team's or another's, and the flavor and resources it
    needs). Its reason is its team's to read, so another team's workload is not named (nor
    its team)."""
    other = res.workload
    shared = sorted(usage.keys() & res.usage.keys())
    needs = ", ".join(amount(fr, res.usage[fr]) for fr in shared)
    own = other.team == team
    whom = other.name if own else "a workload of another team"
    return PendingReason(
        f"held back for {whom} (pending {now - other.submit_time:.0f}s), which needs "
        f"{needs} on {shared[0][0]} first (starvation guard)",
        "held-back",
        ("held-back", own, shared[0][0], *(fr[1] for fr in shared)),
    )


class StarvationGuard:
    """The guard in one cycle: who starves, what they reserve, and whom that holds back."""

    def __init__(
        self,
        seconds: float | None,
        now: float,
        model: QuotaModel,
        state: CycleState,
        flavors: Flavors,
        of: dict[int, tuple[Shape, QueueKey, Workload]],
        namespaces: NamespaceLabels | None = None,
    ) -> None:
        self.seconds = seconds
        """``starvation_guard_seconds`` (None: no guard)."""
        self.now = now
        self.model = model
        self.state = state
        self.flavors = flavors
        self._of = of
        self._namespaces: NamespaceLabels = namespaces or {}
        """The namespaces' labels (a refused workload reserves nothing)."""
        self.reservations = Reservations()
        self._shape_reserved: dict[int, Reservation] = {}
        """Per shape, the reservation of its longest-waiting starving member: the members
        behind it wait behind it (same team, needs and priority), so they reserve nothing."""
        self._fits_empty: dict[tuple[object, ...], bool] = {}

    def held_by(self, wl: Workload, option: Option) -> Reservation | None:
        """The reservation that holds ``wl`` back on ``option``, if any."""
        if not self.reservations:
            return None
        return self.reservations.held_by(wl, option.usage, option.within)

    def starving(self, wl: Workload) -> bool:
        seconds = self.seconds
        return seconds is not None and self.now - wl.submit_time >= seconds

    def may_reserve(self, wl: Workload, shape: int) -> bool:
        """Starving, and no earlier member of its shape holds a reservation: trying it may
        make one (so it is tried in full, never settled by its shape's failure)."""
        if not self.starving(wl):
            return False
        res = self._shape_reserved.get(shape)
        return res is None or not res.active or res.workload is wl

    def reserve_starving(self, shapes: Iterable[Shape]) -> int:
        """Before the cycle: every starving workload that does not fit now reserves. Returns
        how many reserved."""
        now = self.now
        seconds = self.seconds
        assert seconds is not None
        shapes = list(shapes)
        # a StrictFIFO team's work waits behind its head: only the head may reserve
        strict = {name for name, rules in self.model.teams.items() if rules.strict_fifo}
        heads: dict[str, QueueKey] = {}
        for shape in shapes if strict else ():
            if shape.team in strict:
                head = heads.get(shape.team)
                if head is None or shape.keys[0] < head:
                    heads[shape.team] = shape.keys[0]
        # a shape's members wait longest first, and only its first starving member reserves
        starving = [shape.wls[0] for shape in shapes if now - shape.keys[0][1] >= seconds]
        made = 0
        for wl in sorted(starving, key=queue_key):
            rules = self.model.teams.get(wl.team)
            if rules is None or rules.refusal(wl, self._namespaces) is not None:
                continue
            if not self.starving(wl):
                continue
            if heads and wl.team in heads and queue_key(wl) != heads[wl.team]:
                continue
            option = self.flavors.first_option(wl)
            if option is None:
                continue
            free = self.state.fit.flavor_free
            if option.mode != SHORT and all(v <= free(fr) for fr, v in option.usage.items()):
                continue  # probably fits; if it does not, the cycle reserves when it meets it
            made += self.reserve(wl, option)
        return made

    def reserve(self, wl: Workload, option: Option) -> bool:
        """A starving workload that failed reserves what ``option`` asks for, unless an
        earlier member of its shape does or it could never fit. True if it reserved."""
        if wl.name in self.reservations or not self.starving(wl):
            return False
        shape = self._of[id(wl)][0].uid
        first = self._shape_reserved.get(shape)
        if first is not None and first.active:
            return False  # an earlier member of its shape reserves; this one waits behind it
        if not self._could_ever_fit(wl, option):
            return False
        usage = {fr: v for fr, v in option.usage.items() if v > 0}
        state = self.state
        team_only = any(
            value > state.ceiling(wl.team, fr)
            for fr, value in usage.items()
            if fr in self.model.governed
        )
        reservation = Reservation(wl, usage, team_only)
        self.reservations.add(reservation)
        self._shape_reserved[shape] = reservation
        return True

    def _could_ever_fit(self, wl: Workload, option: Option) -> bool:
        """Would the workload fit in an empty cluster, within its team's limits?"""
        node = self.model.nodes[wl.team]
        capacity = self.state.capacity
        for fr, value in option.usage.items():
            if fr not in self.model.governed:
                continue
            limit = node.borrowing_limit.get(fr)
            most = borrowing.most_held(
                node.quota.get(fr, 0), None if limit is None else limit.amount
            )
            cap = capacity.get(fr, 0)
            if value > (cap if most is None else min(most, cap)):
                return False
        shape = (option.flavors, tuple((ps.count, *ps.requests.items()) for ps in wl.podsets))
        known = self._fits_empty.get(shape)
        if known is None:
            fit = self.state.fit
            saved = fit.free
            fit.free = fit.allocatable
            try:
                plan = fit.place(option.flavors, wl.podsets, explain=False)
                known = self._fits_empty[shape] = not isinstance(plan, NoFit)
            finally:
                fit.free = saved
        return known
