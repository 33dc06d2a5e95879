"""Preemption never goes back and forth while nothing changes.

Between two changes of the world (a submission, a finish, a node or policy change) no workload
is preempted twice and none preempts one that preempted it: no admit -> preempt -> admit cycle
between the same pair, and every run of preemptions ends, whatever mix of reclaim, in-team
priority and fair share drives it (``Snapshot.preempted_since_change`` and ``preempted_by``).
Checked on random clusters, policies and streams (run to their end, so a run that never ends
fails), and on the Kueue scheduler benchmark's generator, where fair share used to preempt one
workload ten times at one instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetshare.model.catalog import load_catalog
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import Runner
from fleetshare.simulate.run import build_scenario, from_trace
from fleetshare.simulate.variants import select
from tests.conftest import load_case
from tests.strategies import Case, cases
from tests.test_runner_speedups import random_scenario

CHANGES = frozenset({"submit", "finish", "node", "policy"})
GOVERNANCE = frozenset({"reclaim", "priority", "fair-share", "reclaim-while-borrowing"})
"""Preemptions governance decides (not node removals)."""


def loops(events: Sequence[dict[str, Any]]) -> list[str]:
    """Every breach of the rule in an event log: a workload preempted twice, or preempting one
    that preempted it, with no change of the world in between."""
    out: list[str] = []
    by_whom: dict[str, set[str]] = {}
    for event in events:
        kind = event["event"]
        if kind in CHANGES:
            by_whom.clear()
        elif kind == "preempt" and event["reason"] in GOVERNANCE:
            victim, by, at = event["workload"], event["by"], event["at"]
            if victim in by_whom:
                out.append(f"t={at}: {victim} preempted twice (the second time by {by})")
            if victim in by_whom.get(by, ()):
                out.append(f"t={at}: {by} preempts {victim}, which preempted it")
            by_whom.setdefault(victim, set()).add(by)
    return out


def test_the_rule_is_checked_by_the_log_reader() -> None:
    """The checker itself, on a hand-made log: a ping-pong is caught, a change resets."""
    log = [
        {"at": 0, "event": "preempt", "workload": "b", "by": "a", "reason": "fair-share"},
        {"at": 2, "event": "preempt", "workload": "a", "by": "b", "reason": "priority"},
        {"at": 3, "event": "submit", "workload": "c"},
        {"at": 3, "event": "preempt", "workload": "b", "by": "a", "reason": "reclaim"},
    ]
    assert loops(log) == ["t=2: b preempts a, which preempted it"]  # a change at t=3 resets
    log.append({"at": 3, "event": "preempt", "workload": "b", "by": "c", "reason": "priority"})
    assert loops(log)[-1] == "t=3: b preempted twice (the second time by c)"


def fair_share_run(data: dict[str, Any], fair_share: bool = True) -> dict[str, Any]:
    data["policy"]["cluster"]["fair_share"] = fair_share
    data["policy"]["cluster"].setdefault("preemption", {})["min_runtime_seconds"] = 0
    return to_json(Runner(load_case(data)).run())


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(events=True, contended=True, min_workloads=3))
def test_random_runs_never_loop(case: Case) -> None:
    out = fair_share_run(case.scenario_dict())
    assert loops(out["events"]) == []


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000))
def test_random_streams_with_priorities_and_groups_never_loop(seed: int) -> None:
    out = fair_share_run(random_scenario(seed))
    assert loops(out["events"]) == []


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(events=True, contended=True, min_workloads=3, kueue=True, fair_share=False))
def test_random_runs_with_borrow_within_cohort_never_loop(case: Case) -> None:
    """Classic preemption (fair share off, as borrowWithinCohort requires) with Kueue's queue
    settings drawn per team: StrictFIFO, borrowWithinCohort with or without a threshold."""
    out = fair_share_run(case.scenario_dict(), fair_share=False)
    assert loops(out["events"]) == []


@st.composite
def borrowing_cohorts(draw: st.DrawFn) -> dict[str, Any]:
    """Three teams of one group, each with 2 of the 6 GPUs, that all borrow and preempt
    borrowed work of lower priority to borrow (borrowWithinCohort, with a threshold or not):
    a stream of 1-4 GPU jobs (1-2 pods) of three priorities keeps them borrowing from each
    other."""
    teams = []
    for i in range(3):
        teams.append(
            {
                "name": f"t{i}",
                "group": "cohort",
                "quota": [{"resources": {"nvidia.com/gpu": 2, "cpu": 16}}],
                "reclaim": draw(st.sampled_from(("Any", "LowerPriority"))),
                "preempt_team_tasks": draw(
                    st.sampled_from(("Never", "LowerPriority", "LowerOrNewerEqualPriority"))
                ),
                "queueing_strategy": draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO"))),
                "borrow_within_cohort": {
                    "policy": "LowerPriority",
                    "max_priority_threshold": draw(st.sampled_from((None, None, 10, 50))),
                },
            }
        )
    stream = []
    for i in range(draw(st.integers(4, 14))):
        stream.append(
            {
                "name": f"w{i}",
                "team": f"t{draw(st.integers(0, 2))}",
                "priority": draw(st.sampled_from(("low", "mid", "high"))),
                "at": draw(st.integers(0, 6)) * 10,
                "duration": draw(st.integers(2, 12)) * 10,
                "pods": draw(st.integers(1, 2)),
                "requests": {"nvidia.com/gpu": draw(st.integers(1, 2)), "cpu": 1},
            }
        )
    nodes = [{"name": f"n{i}", "allocatable": {"cpu": 16, "nvidia.com/gpu": 2}} for i in range(3)]
    policy = {
        "cluster": {
            "priority_classes": [
                {"name": "low", "weight": 10},
                {"name": "mid", "weight": 50},
                {"name": "high", "weight": 90},
            ],
            "idle_resource_sharing": False,
            "starvation_guard_seconds": None,
        },
        "groups": [{"name": "cohort"}],
        "teams": teams,
    }
    return {"name": "borrowing", "cluster": {"nodes": nodes}, "policy": policy, "workloads": stream}


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(borrowing_cohorts())
def test_preempting_to_borrow_never_loops(data: dict[str, Any]) -> None:
    """Teams preempting each other's borrowed work to borrow themselves
    (reclaim-while-borrowing), with reclaim and in-team priority preemption mixed in."""
    out = fair_share_run(data, fair_share=False)
    assert loops(out["events"]) == []


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 10_000))
def test_random_streams_with_kueue_queue_settings_never_loop(seed: int) -> None:
    """The same with priorities, groups, local queues and admission fair sharing."""
    out = fair_share_run(random_scenario(seed, kueue=True), fair_share=False)
    assert loops(out["events"]) == []


def test_a_ring_of_preemptions_across_wake_ups_ends() -> None:
    """Found by a random stream (seed 84): with only pairs forbidden, fair share and priority
    passed work round a ring of three teams at every wake-up, and the run never ended."""
    out = fair_share_run(random_scenario(84))
    assert loops(out["events"]) == []
    assert len(out["events"]) < 5000
    assert all(w["state"] in ("finished", "pending") for w in out["workloads"].values())


def test_the_kueue_generator_under_fair_share_does_not_loop() -> None:
    """One cohort of Kueue's benchmark generator (6 queues, 3,000 workloads: reclaim within
    the cohort, LowerPriority within a queue) with fair share on and no minimum runtime. It
    used to make 7,683 preemptions, one workload preempted 10 times at one instant, 456
    workloads more than once at an instant; now every workload is preempted at most once per
    instant and the rule holds throughout."""
    catalog = load_catalog()
    inp = from_trace("kueue-generator", {"cohorts": 1}, catalog=catalog)
    result = Runner(build_scenario(inp, select(["fair-share"])[0], catalog)).run()
    assert loops(result.events) == []
    per_instant: dict[tuple[float, str], int] = {}
    for name, record in result.records.items():
        for p in record.preemptions:
            key = (p["at"], name)
            per_instant[key] = per_instant.get(key, 0) + 1
    assert max(per_instant.values()) == 1
    assert all(r.state == "finished" for r in result.records.values())
