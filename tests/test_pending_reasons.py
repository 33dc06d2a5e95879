"""A pending reason's numbers are those of the state the cycle leaves (issue 27 item 9).

A reason given when a workload was tried goes stale when later work in the same cycle is
admitted or evicted ("2 available now" once the quota was lent): the cycle gives it again,
on paper, in its final state (``Cycle._refresh_reasons``).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given

from fleetshare.governance.admission import Engine
from fleetshare.governance.snapshot import Assignment, CycleResult, Running, Snapshot
from fleetshare.model.node import Node
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import load_policy
from tests.strategies import GPU, Case, cases_with_snapshots
from tests.test_properties import PROPERTY_SETTINGS, _note, engine_for


def _after(snapshot: Snapshot, result: CycleResult) -> Snapshot:
    """The snapshot the next cycle at the same instant sees, when nothing else happens."""
    gone = {p.workload.name for p in result.preemptions}
    admitted = {a.workload.name for a in result.admissions}
    running = [r for r in snapshot.running if r.workload.name not in gone]
    running += [Running(a.workload, a.assignment, snapshot.now) for a in result.admissions]
    pending = [w for w in snapshot.pending if w.name not in admitted]
    pending += [r.workload for r in snapshot.running if r.workload.name in gone]
    return replace(snapshot, running=running, pending=pending)


@PROPERTY_SETTINGS
@given(cases_with_snapshots())
def test_reasons_are_those_of_the_state_the_cycle_leaves(
    case_snapshot: tuple[Case, Snapshot],
) -> None:
    """When a cycle admitted work (and evicted none: then the work tried before the eviction
    goes first in the next cycle at that instant, ``ahead.py``) and the next cycle at the same
    instant changes nothing, a fresh engine gives every workload still pending the same
    reason and queue position as the cycle before."""
    case, snapshot = case_snapshot
    first = engine_for(case).cycle(snapshot)
    if not first.admissions or first.preemptions:
        return
    second = engine_for(case).cycle(_after(snapshot, first))
    if second.admissions or second.preemptions:
        _note("the next cycle changed something")
        return
    _note("reasons compared after a cycle that changed the state")
    for name, pending in first.pending.items():
        again = second.pending[name]
        assert (pending.reason, pending.position) == (again.reason, again.position), name


def test_a_reason_given_before_a_later_admission_is_given_again() -> None:
    """``a`` (quota 3 of 3 one-GPU nodes, ``b`` holding one) asks for 3 pods within its
    quota: tried first, it finds room for 2 of 3 pods. ``b`` then borrows the last free
    GPU. The reason ``a`` is left with is the state after that: its quota is lent out, 2
    available (it said "room for 2 of 3 pods", which was no longer true)."""
    engine = Engine(
        load_policy(
            {
                "cluster": {"fair_share": False, "starvation_guard_seconds": None},
                "teams": [
                    {"name": "a", "quota": [{"resources": {GPU: 3}}]},
                    {"name": "b", "quota": [{"resources": {GPU: 1}}]},
                ],
            }
        )
    )
    nodes = [Node(f"n{i}", {GPU: 1000, "cpu": 8000}) for i in range(3)]
    held = Workload("b0", "b", (PodSet("main", 1, {GPU: 1000}),), 0, 0)
    running = [Running(held, Assignment(("default",), ((("n0", 1),),)), 0)]
    gang = Workload("a1", "a", (PodSet("main", 3, {GPU: 1000}),), 1, 0)
    small = Workload("b1", "b", (PodSet("main", 1, {GPU: 1000}),), 2, 0)
    result = engine.cycle(Snapshot(10, nodes, running, [gang, small]))
    assert [a.workload.name for a in result.admissions] == ["b1"]
    assert result.pending["a1"].reason == (
        "a's quota of 3 nvidia.com/gpu on default is lent out: 2 available now, needs 3"
    )


def _cohorts_apart_cycle(b_group: str, b_quota: int, b_asks: int) -> CycleResult:
    """Two cohorts that borrow and lend nothing outside (as the Kueue importer's root
    cohorts): in ``g1``, ``a`` takes its quota back from ``c``'s borrowing work (``c0``
    preempted); ``b`` (quota ``b_quota``, in ``b_group``) asks for ``b_asks`` CPUs, more
    than its quota, in the same cycle."""
    apart = {
        "borrow_limits": [{"resource": "cpu", "absolute": 0}],
        "lending_limits": [{"resource": "cpu", "absolute": 0}],
    }
    engine = Engine(
        load_policy(
            {
                "cluster": {"fair_share": False, "starvation_guard_seconds": None},
                "groups": [{"name": "g0", **apart}, {"name": "g1", **apart}],
                "teams": [
                    {"name": "a", "group": "g1", "quota": [{"resources": {"cpu": 10}}]},
                    {"name": "c", "group": "g1", "quota": [{"resources": {"cpu": 10}}]},
                    {"name": "b", "group": b_group, "quota": [{"resources": {"cpu": b_quota}}]},
                    {"name": "d", "group": "g0", "quota": [{"resources": {"cpu": 10}}]},
                ],
            }
        )
    )
    c0 = Workload("c0", "c", (PodSet("main", 1, {"cpu": 15_000}),), 0, 0)
    running = [Running(c0, Assignment(("default",), ((("n", 1),),)), 0)]
    a1 = Workload("a1", "a", (PodSet("main", 1, {"cpu": 10_000}),), 1, 0)
    b1 = Workload("b1", "b", (PodSet("main", 1, {"cpu": b_asks * 1000}),), 2, 0)
    return engine.cycle(Snapshot(10, [Node("n", {"cpu": 100_000})], running, [a1, b1]))


def test_a_preemption_defers_borrowing_only_in_the_cohort_whose_quota_it_would_borrow() -> None:
    """Work preempted in a cycle goes first in the next cycle at that instant, so borrowing
    work that its team may take quota back from waits for it (``ahead.py``). Borrowing work
    of a cohort that shares nothing with that team does not wait: it is admitted in the same
    cycle, and its reason never names a team it cannot borrow from (on Kueue's generator
    trace, 12,786 of 15,893 such reasons named a team of another root cohort)."""
    same = _cohorts_apart_cycle("g1", 1, 5)  # b borrows from g1's teams, c among them
    assert [p.workload.name for p in same.preemptions] == ["c0"]
    assert [a.workload.name for a in same.admissions] == ["a1"]
    assert same.pending["b1"].reason == (
        "waits: work of c was preempted in this cycle; it is tried first in the next cycle at "
        "this instant"
    )
    apart = _cohorts_apart_cycle("g0", 10, 15)  # b borrows from d only
    assert [p.workload.name for p in apart.preemptions] == ["c0"]
    assert [a.workload.name for a in apart.admissions] == ["a1", "b1"]
    assert "b1" not in apart.pending
