"""Issue 29's first slice: the borrowing formulas on hand-computed numbers, the autoscaler's
note as data that each sink words, and a pod too large for every node as a typed value."""

from __future__ import annotations

import time

from fleetshare.control.changes import AutoscalerNote, loop_time, preemptor_team
from fleetshare.governance import borrowing
from fleetshare.model.node import Node
from fleetshare.model.reason import Reason
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.fit import NodeFit, NoFit, TooLarge


def test_available_keeps_the_local_part_and_caps_what_the_parent_gives() -> None:
    # kept 3, usage 1: 2 of its own; the parent has 10, the limit lets it hold 5 + 2 = 7,
    # of which 5 - 3 = 2 are stored in the parent and none used there: 2 + 2 = 4 from it
    assert borrowing.available(1, 5, 3, 10, 2) == 2 + 4
    assert borrowing.available(1, 5, 3, 10, None) == 2 + 10  # no limit: all the parent's
    assert borrowing.available(9, 5, 3, 10, 2) == 0  # past its limit: nothing more


def test_potential_available_and_the_team_ceiling() -> None:
    assert borrowing.potential_available(5, 3, 10, 2) == 7  # min(3 + 10, 5 + 2)
    assert borrowing.potential_available(5, 3, 10, None) == 13
    assert borrowing.most_held(5, None) is None
    assert borrowing.idle_limit(7, 50.0) == 3  # floor(350 / 100)
    # quota 4, usage 1: 3 of quota, borrowing at most 2 more, or 3 of the idle pool
    assert borrowing.ceiling(4, 1, 2, None) == 5
    assert borrowing.ceiling(4, 1, 2, 1) == 4
    assert borrowing.ceiling(4, 1, None, None) == float("inf")
    assert borrowing.ceiling(4, 6, 0, None) == -2  # above quota: its headroom, negative


def test_each_sink_words_the_autoscalers_note_its_own_way() -> None:
    note = AutoscalerNote("launching", ("n1", "n2"), 5, 91.0)
    assert note.message(loop_time) == "nodes launching for it: n1, n2 and 3 more (ready at t=91)"
    stamp = note.message(lambda at: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)))
    assert stamp.endswith("(ready at 1970-01-01T00:01:31Z)")
    assert AutoscalerNote("cannot-add", reason="no pool allows it").message(loop_time) == (
        "the autoscaler cannot add nodes for it: no pool allows it"
    )


def test_the_preemptors_team_and_an_evictions_details() -> None:
    wl = Workload("w", "a", (PodSet("main", 1, {"cpu": 1000}),))
    assert preemptor_team("w", {}, {"w": wl}) == "a"
    assert preemptor_team("node-1", {}, {"w": wl}) is None
    assert Reason("removed", "removed").details == ""
    assert Reason("repair", "unhealthy for 10m").details == "unhealthy for 10m"


def test_a_pod_larger_than_every_node_is_said_by_a_typed_value() -> None:
    fit = NodeFit([Node("n", {"cpu": 4000})], {"n": "f"})
    podset = PodSet("big", 1, {"cpu": 8000})
    found = fit.place(["f"], [podset])
    assert isinstance(found, NoFit)
    assert found.too_large == TooLarge("f", "big", 1)
    assert (
        found.message
        == str(found.too_large)
        == "a pod of 'big' is larger than any f node (1 nodes)"
    )
    assert fit.larger_than_every_node(["f"], [podset]) == found.too_large
    small = fit.place(["f"], [PodSet("many", 3, {"cpu": 2000})])
    assert isinstance(small, NoFit) and small.too_large is None
