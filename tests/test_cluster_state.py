"""The cluster state the scenario runner and the service's backend share
(``control/state.py``): each rule a backend follows when it acts, as the typed changes its
sink receives."""

from __future__ import annotations

from fleetshare.control.changes import (
    Admitted,
    AutoscalerNote,
    Change,
    Finished,
    NodeJoined,
    NodeLeft,
    PendingReasonChanged,
    Preempted,
)
from fleetshare.control.state import (
    FINISH,
    NODE,
    SUBMIT,
    WAKE,
    ClusterState,
    FinishTimer,
    Waiting,
)
from fleetshare.governance.snapshot import Admission, Assignment, CycleResult, Pending, Running
from fleetshare.model.node import Node
from fleetshare.model.reason import Gist, Keyed, PendingReason, Reason
from fleetshare.model.workload import PodSet, Workload

NODE_A = Node("a", {"cpu": 8000})


def _state() -> tuple[ClusterState, list[Change]]:
    changes: list[Change] = []
    state = ClusterState(changes.append)
    state.nodes["a"] = NODE_A
    return state, changes


def _job(name: str, team: str = "t", duration: float | None = 10.0) -> Workload:
    return Workload(name, team, (PodSet("main", 1, {"cpu": 1000}),), duration=duration)


def _admit(state: ClusterState, wl: Workload, now: float) -> None:
    assignment = Assignment(("default",), ((("a", 1),),))
    state.bind(Admission(wl, assignment, {}), now)
    state.settle(now)


def _run_timers(state: ClusterState, until: float) -> None:
    for at, kind, payload in state.due(until):
        if kind == FINISH:
            assert isinstance(payload, FinishTimer)
            state.finish_due(at, payload)


def test_a_workload_admitted_again_finishes_at_the_end_of_its_second_run() -> None:
    state, changes = _state()
    wl = _job("w")
    state.pending.put(wl)
    _admit(state, wl, 0.0)
    state.evict(wl, "big", "priority", "a higher priority", 5.0)
    _admit(state, wl, 6.0)
    _run_timers(state, 12.0)  # the first run's timer (t=10) does nothing
    assert "w" in state.running
    _run_timers(state, 16.0)
    assert "w" not in state.running
    assert [type(c) for c in changes] == [Admitted, Preempted, Admitted, Finished]
    assert changes[-1].at == 16.0


def test_a_cancelled_workload_does_not_finish_and_leaves_its_queue() -> None:
    state, changes = _state()
    running, waiting = _job("r"), _job("p")
    state.pending.put(running)
    state.pending.put(waiting)
    _admit(state, running, 0.0)
    assert state.cancel("r") and state.cancel("p") and not state.cancel("gone")
    _run_timers(state, 100.0)
    assert not state.running and not state.pending
    assert [type(c) for c in changes] == [Admitted]


def test_timers_at_one_instant_apply_finishes_nodes_submissions_then_wake_ups() -> None:
    state, _ = _state()
    state.wake(5.0, 0.0)
    state.push(5.0, SUBMIT, "second submission")
    state.push(5.0, SUBMIT, "third submission")
    state.push(5.0, NODE, "node event")
    state.push(5.0, FINISH, "finish")
    state.push(4.0, SUBMIT, "first submission")
    assert [(at, kind) for at, kind, _ in state.due(5.0)] == [
        (4.0, SUBMIT),
        (5.0, FINISH),
        (5.0, NODE),
        (5.0, SUBMIT),
        (5.0, SUBMIT),
        (5.0, WAKE),
    ]
    assert state.next_timer() is None


def test_a_wake_up_is_set_once_in_the_future_and_not_when_a_timer_comes_sooner() -> None:
    state, _ = _state()
    state.wake(3.0, 5.0)  # in the past
    state.wake(8.0, 5.0)
    state.wake(8.0, 5.0)  # set already
    state.wake(9.0, 5.0, unless_sooner=True)  # the loop runs at 8 anyway
    assert [at for at, _, _ in state.due(10.0)] == [8.0]
    assert not state.expecting()
    state.wake(9.0, 5.0, unless_sooner=True)
    assert state.next_timer() == 9.0 and not state.expecting()


def test_a_node_that_leaves_requeues_its_work_by_the_node_for_the_reasons_category() -> None:
    state, changes = _state()
    wl = _job("w")
    state.pending.put(wl)
    _admit(state, wl, 0.0)
    assert state.remove_node("a", Reason("spot-interruption", "reclaimed by the cloud"), 3.0)
    assert "a" not in state.nodes and "w" in state.pending and not state.running
    left, preempted = changes[1:]
    assert isinstance(left, NodeLeft) and left.node == "a"
    assert preempted == Preempted(
        3.0, "w", "t", "a", None, "spot-interruption", "reclaimed by the cloud"
    )
    _run_timers(state, 20.0)
    assert not any(isinstance(c, Finished) for c in changes)


def test_a_preemption_names_the_preemptors_team() -> None:
    state, changes = _state()
    victim, preemptor = _job("v"), _job("big", team="other")
    state.pending.put(victim)
    _admit(state, victim, 0.0)
    state.pending.put(preemptor)
    state.evict(victim, "big", "reclaim", "its quota back", 1.0)
    assert isinstance(changes[-1], Preempted) and changes[-1].by_team == "other"


def _cycle(
    wl: Workload, reason: str, gist: Gist | None = None, *, changed: bool = True
) -> CycleResult:
    """A cycle leaving ``wl`` pending for ``reason`` of key ``gist`` (None: its words)."""
    pending = {wl.name: Pending(wl, PendingReason(reason, "quota", gist), 1)}
    return CycleResult(pending=pending, pending_changed=[wl.name] if changed else [])


def test_a_reason_is_reported_when_it_changes_in_substance_not_for_its_numbers() -> None:
    state, changes = _state()
    state.autoscaled = True  # every reason set again each cycle
    wl = _job("w")
    state.pending.put(wl)
    state.report_pending(_cycle(wl, "not enough quota: needs 2", ("short", "cpu")), 1.0)
    note = AutoscalerNote("launching", ("n-1",), 1, ready_at=91.0)
    state.note_pending("w", note)
    state.note_pending("w", note)  # once
    assert state.waiting["w"].reason == (
        "not enough quota: needs 2; nodes launching for it: n-1 (ready at t=91)"
    )
    state.report_pending(
        _cycle(wl, "not enough quota: needs 3", ("short", "cpu")), 2.0
    )  # only a number
    assert state.waiting["w"].reason == "not enough quota: needs 3"  # the old note went
    state.report_pending(_cycle(wl, "no node has room", ("no-room", "x")), 3.0)
    said = [(c.at, c.reason) for c in changes if isinstance(c, PendingReasonChanged)]
    assert said == [(1.0, "not enough quota: needs 2"), (3.0, "no node has room")]


def test_unreported_positions_are_the_last_cycles_once_settled() -> None:
    state, _ = _state()
    first, second = _job("a"), _job("b")
    state.pending.put(first)
    state.pending.put(second)
    reason = PendingReason("no node has room", "capacity")
    both = {"a": Pending(first, reason, 1), "b": Pending(second, reason, 2)}
    state.report_pending(CycleResult(pending=both, pending_changed=["a", "b"]), 1.0)
    state.cancel("a")
    moved = {"b": Pending(second, reason, 1)}
    state.report_pending(CycleResult(pending=moved, pending_changed=[]), 2.0)
    assert state.waiting["b"].position == 2  # not reported: unchanged until settled
    state.settle_positions()
    assert state.waiting["b"].position == 1 and "a" not in state.waiting


def test_a_joining_node_is_a_change() -> None:
    state, changes = _state()
    state.join(Node("b", {"cpu": 4000}), 7.0)
    assert changes == [NodeJoined(7.0, "b")] and "b" in state.nodes
    view = state.node_list()
    state.cordon("b", False)  # uncordoned already: the same nodes
    assert state.node_list() is view
    state.cordon("b")
    assert state.node_list() is not view and state.nodes["b"].unschedulable


def test_the_runner_requeues_a_removed_nodes_work_and_warns_of_an_unknown_node() -> None:
    """The scenario runner on the shared state: a removed node's work is requeued by the node
    and runs its whole duration again; a node event naming no node is a warning with its time."""
    from tests.conftest import run_case

    policy = {"teams": [{"name": "a", "quota": [{"resources": {"cpu": 8}}]}]}
    nodes = [{"name": "n", "count": 2, "allocatable": {"cpu": 4}}]
    jobs = [{"name": "j", "team": "a", "requests": {"cpu": 4}, "duration": 100}]
    events = [
        {"at": 10, "action": "remove", "nodes": ["n-0"]},
        {"at": 20, "action": "cordon", "nodes": ["nope"]},
    ]
    result = run_case(policy, nodes, jobs, events=events)
    job = result["workloads"]["j"]
    assert job["preemptions"] == [{"at": 10, "by": "n-0", "reason": "node-removed"}]
    assert job["state"] == "finished" and job["finished_at"] == 110
    assert "t=20: node event cordon names unknown nope" in result["warnings"]


def test_an_admission_forgotten_at_its_instant_is_never_carried_out() -> None:
    """Kueue's cache assumes an admission and may forget it before it is applied: a later
    cycle of the same instant preempting it undoes it; the sink hears neither the admission
    nor an eviction, the workload waits again with the reason it had, and its finish timer
    does nothing. The rest of the instant's changes keep their order."""
    state, changes = _state()
    wl, other = _job("w"), _job("o")
    state.pending.put(wl)
    state.pending.put(other)
    reason = PendingReason("waits for quota", "quota")
    state.waiting["w"] = Waiting(reason, 1, reason)
    assignment = Assignment(("default",), ((("a", 1),),))
    state.bind(Admission(wl, assignment, {}), 0.0)
    state.bind(Admission(other, assignment, {}), 0.0)
    assert changes == []  # assumed: nothing carried out before the instant is settled
    state.forget(wl, 0.0)
    state.settle(0.0)
    assert [(type(c), getattr(c, "workload", None)) for c in changes] == [(Admitted, other)]
    assert "w" in state.pending and "w" not in state.running
    assert state.waiting["w"].reason is reason
    _run_timers(state, 20.0)
    assert [type(c) for c in changes] == [Admitted, Finished]  # only o's run ends


def test_blocked_work_waits_but_no_cycle_sees_it() -> None:
    """A pending workload a backend blocks (the operator's: a write of theirs outstanding)
    stays in the pending book; neither a cycle nor the autoscaler sees it until unblocked."""
    state, _ = _state()
    first, second = _job("a"), _job("b")
    state.pending.put(first)
    state.pending.put(second)
    state.blocked.add("a")
    assert list(state.pending_for_cycle()) == [second]
    assert state.pending_workloads() == [second] and "a" in state.pending
    state.blocked.clear()
    assert list(state.pending_for_cycle()) == [first, second]


def test_an_admission_the_world_refused_waits_again_without_a_change() -> None:
    """Carried out, then refused by the world (the operator's write turned down): the
    workload waits again, its finish timer does nothing, and no change says it stopped."""
    state, changes = _state()
    wl = _job("w")
    state.pending.put(wl)
    state.bind(Admission(wl, Assignment(("default",), ((("a", 1),),)), {}), 0.0)
    assert list(state.assumed()) == ["w"]
    state.settle(0.0)
    assert not state.assumed() and [type(c) for c in changes] == [Admitted]
    state.unbind(wl)
    assert "w" in state.pending and "w" not in state.running
    _run_timers(state, 20.0)
    assert [type(c) for c in changes] == [Admitted]


def test_a_backend_that_stops_work_its_own_way_evicts_a_nodes_work_through_it() -> None:
    """A node's work is evicted through the backend's own eviction (the operator writes its
    objects first), by the node, for the reason given; True when there was some."""

    class Writing(ClusterState):
        def __init__(self) -> None:
            super().__init__(lambda change: None)
            self.written: list[str] = []

        def evict(self, workload: Workload, by: str, reason: str, message: str,
                  now: float) -> None:  # fmt: skip
            self.written.append(f"{workload.name} by {by}: {reason}")
            super().evict(workload, by, reason, message, now)

    state = Writing()
    state.nodes["a"] = NODE_A
    _admit(state, _job("w"), 0.0)
    assert state.evict_from("a", "node-failure", "node a is NotReady", 1.0)
    assert state.written == ["w by a: node-failure"] and "w" in state.pending
    assert not state.evict_from("a", "node-failure", "", 2.0)


def test_the_world_read_whole_keeps_the_reasons_of_what_still_waits() -> None:
    """A backend reading its world whole (the operator after a policy change): what runs and
    waits is as read, in that order; what left is gone with its reason; what still waits
    keeps its reason (it is not said again)."""
    state, changes = _state()
    a, b, c = _job("a"), _job("b"), _job("c")
    _admit(state, a, 0.0)
    state.pending.put(b)
    state.pending.put(c)
    reason = PendingReason("no node has room", "capacity")
    state.report_pending(CycleResult(pending={"b": Pending(b, reason, 1),
                                              "c": Pending(c, reason, 2)}), 1.0)  # fmt: skip
    running = {"c": Running(c, Assignment(("default",), ((("a", 1),),)), 2.0)}
    state.read(running, [a, b])
    assert list(state.running) == ["c"] and list(state.pending) == ["a", "b"]
    assert set(state.waiting) == {"b"}
    said = len(changes)
    state.report_pending(CycleResult(pending={"b": Pending(b, reason, 1)}), 3.0)
    assert len(changes) == said


def test_a_note_is_new_when_it_says_something_new_not_for_its_times() -> None:
    """The autoscaler's note, in the backend's words: new when it says something new in
    substance since the last note of this wait, not when only its time moved; the last note
    outlives a change of the engine's reason; an admission ends the wait and its notes."""
    state, _ = _state()
    state.when = lambda at: f"at {at:g} s"
    wl = _job("w")
    state.pending.put(wl)
    state.report_pending(_cycle(wl, "no node has room"), 1.0)
    first = AutoscalerNote("launching", ("n-1",), 1, ready_at=91.0)
    assert state.noted("w", first)
    assert (
        state.waiting["w"].reason
        == "no node has room; nodes launching for it: n-1 (ready at at 91 s)"
    )
    assert not state.noted("w", AutoscalerNote("launching", ("n-1",), 1, ready_at=95.0))
    assert state.waiting["w"].reason.endswith("(ready at at 95 s)")  # one note, the latest
    state.report_pending(_cycle(wl, "not enough quota"), 2.0)
    assert not state.noted("w", first)  # the same note, the engine's reason new
    assert state.noted("w", AutoscalerNote("cannot-add", reason=Keyed("no pool fits")))
    _admit(state, wl, 3.0)
    state.evict(wl, "x", "priority", "", 4.0)
    state.report_pending(_cycle(wl, "not enough quota"), 5.0)
    assert state.noted("w", first)  # a new wait: its note is said again


def test_a_warning_is_kept_once_among_the_recent_ones() -> None:
    warnings: list[str] = []
    assert ClusterState.keep_warning(warnings, "w")
    assert not ClusterState.keep_warning(warnings, "w")
    for i in range(120):
        ClusterState.keep_warning(warnings, f"x{i}")
    assert len(warnings) == 100 and ClusterState.keep_warning(warnings, "w")
