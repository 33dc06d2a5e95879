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


def loops(events: Sequence[dict[str, Any]]) -> list[str]:
    """Every breach of the rule in an event log: a workload preempted twice, or preempting one
    that preempted it, with no change of the world in between."""
    out: list[str] = []
    by_whom: dict[str, set[str]] = {}
    for event in events:
        kind = event["event"]
        if kind in CHANGES:
            by_whom.clear()
        elif kind == "preempt" and event["reason"] in ("reclaim", "priority", "fair-share"):
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


def fair_share_run(data: dict[str, Any]) -> dict[str, Any]:
    data["policy"]["cluster"]["fair_share"] = True
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
