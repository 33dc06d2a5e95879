"""Admission, borrowing, reclaim, priority and fair-share preemption: named cases.

Each case is a small cluster, a policy and a stream of workloads; the assertions are what a
platform admin or an ML engineer relies on.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetshare.governance.quota import resolve_entry
from fleetshare.model.catalog import load_catalog
from fleetshare.policy.schema import QuotaEntry
from fleetshare.scenario.loader import ScenarioError
from tests.conftest import run_case

CPU_NODE = [{"name": "n", "allocatable": {"cpu": 12, "memory": "64Gi"}}]
PRIORITIES = [
    {"name": "low", "weight": 10},
    {"name": "incoming", "weight": 15},
    {"name": "mid", "weight": 20},
    {"name": "high", "weight": 30},
]


def cpu_job(name: str, team: str, cpu: float, at: float = 0, **kw: Any) -> dict[str, Any]:
    return {"name": name, "team": team, "at": at, "requests": {"cpu": cpu}, **kw}


def state(result: dict[str, Any], name: str) -> str:
    return str(result["workloads"][name]["state"])


def preempted_by(result: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {
        name: [(p["by"], p["reason"]) for p in wl["preemptions"]]
        for name, wl in result["workloads"].items()
        if wl["preemptions"]
    }


def test_reclaim_preempts_exactly_the_lowest_priority_borrower() -> None:
    """Kueue's public reclaim case: c1 gets its quota back with one preemption, c2's mid job."""
    team = {"quota": [{"resources": {"cpu": 6}}], "borrow_limits": [{"absolute": 6}]}
    policy = {
        "cluster": {"priority_classes": PRIORITIES, "fair_share": False},
        "teams": [{"name": "c1", **team}, {"name": "c2", **team}],
    }
    result = run_case(
        policy,
        CPU_NODE,
        [
            cpu_job("low", "c1", 3, priority="low"),
            cpu_job("mid", "c2", 3, priority="mid"),
            cpu_job("high", "c2", 6, priority="high"),
            cpu_job("incoming", "c1", 3, at=10, priority="incoming"),
        ],
    )
    assert preempted_by(result) == {"mid": [("incoming", "reclaim")]}
    assert state(result, "incoming") == "admitted"
    assert result["workloads"]["mid"]["borrowed"] == {"cpu": 3}


def test_weighted_fair_share_preemption_takes_only_what_is_needed() -> None:
    """Kueue's public fair-sharing case: a (weight 2) takes 2 CPU back from b, the top borrower."""
    policy = {
        "cluster": {"fair_share": True},
        "teams": [
            {"name": "a", "quota": [{"resources": {"cpu": 3}}], "fair_share_weight": 2},
            {"name": "b", "quota": [{"resources": {"cpu": 3}}]},
            {"name": "c", "quota": [{"resources": {"cpu": 3}}]},
        ],
    }
    jobs = [cpu_job(f"a{i}", "a", 1) for i in (1, 2, 3)]
    jobs += [cpu_job(f"b{i}", "b", 1) for i in range(1, 7)]
    jobs.append(cpu_job("a-big", "a", 2, at=10))
    result = run_case(policy, [{"name": "n", "allocatable": {"cpu": 9}}], jobs)
    # Kueue breaks the tie between equal candidates arbitrarily (by UID); fleetshare takes
    # the youngest (b's all started together, b5 and b6 were created last).
    assert preempted_by(result) == {
        "b5": [("a-big", "fair-share")],
        "b6": [("a-big", "fair-share")],
    }
    assert state(result, "a-big") == "admitted"


def test_fair_share_does_not_preempt_a_team_that_borrows_less() -> None:
    """No ping-pong: once shares are even, the other team cannot take the capacity back."""
    policy = {
        "cluster": {"fair_share": True},
        "teams": [
            {"name": "a", "quota": [{"resources": {"cpu": 2}}]},
            {"name": "b", "quota": [{"resources": {"cpu": 2}}]},
            {"name": "c", "quota": [{"resources": {"cpu": 4}}]},
        ],
    }
    jobs = [cpu_job("a-borrow", "a", 4), cpu_job("b-borrow", "b", 4, at=5)]
    result = run_case(policy, [{"name": "n", "allocatable": {"cpu": 8}}], jobs)
    # a borrows 2 of c's idle 4 and b borrows the other 2: equal shares, no preemption.
    assert state(result, "a-borrow") == "admitted"
    assert state(result, "b-borrow") == "admitted"
    jobs.append(cpu_job("a-more", "a", 1, at=10))
    result = run_case(policy, [{"name": "n", "allocatable": {"cpu": 8}}], jobs)
    assert not preempted_by(result)
    assert "not enough quota to borrow for cpu" in result["workloads"]["a-more"]["pending_reason"]


def test_fair_share_ties_between_teams_go_by_candidate_order_not_by_name() -> None:
    """Two teams borrow the same amount (equal shares) and a third, borrowing less, needs
    room: it preempts the job admitted last (the cheaper loss, Kueue's candidate order),
    whatever the teams are called; here that is "alpha"'s, which sorts first by name."""
    policy = {
        "cluster": {"fair_share": True},
        "teams": [
            {"name": "zeta", "quota": [{"resources": {"cpu": 2}}]},
            {"name": "alpha", "quota": [{"resources": {"cpu": 2}}]},
            {"name": "c", "quota": [{"resources": {"cpu": 2}}]},
            {"name": "lender", "quota": [{"resources": {"cpu": 6}}]},
        ],
    }
    jobs = [
        cpu_job("zeta-old", "zeta", 5),
        cpu_job("alpha-new", "alpha", 5, at=1),
        cpu_job("c-more", "c", 4, at=10),
    ]
    result = run_case(policy, [{"name": "n", "allocatable": {"cpu": 12}}], jobs)
    assert preempted_by(result) == {"alpha-new": [("c-more", "fair-share")]}
    assert state(result, "zeta-old") == "admitted"
    assert state(result, "c-more") == "admitted"


def test_a_pod_larger_than_every_node_is_told_so_before_its_quota() -> None:
    """An engineer asking for a 20-CPU pod on 12-CPU nodes learns that no node can hold it,
    not only that the team's quota stands in the way (quota is checked first); a pod that
    fits a node but not the quota is told about the quota alone."""
    policy = {
        "teams": [
            {
                "name": "a",
                "quota": [{"resources": {"cpu": 6}}],
                "borrow_limits": [{"absolute": 1}],
            },
            {"name": "b", "quota": [{"resources": {"cpu": 6}}]},
        ],
    }
    jobs = [cpu_job("huge", "a", 20), cpu_job("over-quota", "a", 10)]
    result = run_case(policy, CPU_NODE, jobs)
    huge = result["workloads"]["huge"]["pending_reason"]
    assert huge.startswith("a pod of 'main' is larger than any default node (1 nodes)")
    assert "borrow" in huge  # the quota problem is still said
    over = result["workloads"]["over-quota"]["pending_reason"]
    assert "larger than" not in over and "borrow" in over


def test_priority_preemption_stays_within_the_team_and_respects_never() -> None:
    policy = {
        "cluster": {"priority_classes": PRIORITIES},
        "teams": [
            {"name": "a", "quota": [{"resources": {"cpu": 6}}], "sharing": "DontLend"},
            {
                "name": "b",
                "quota": [{"resources": {"cpu": 6}}],
                "sharing": "DontLend",
                "preempt_team_tasks": "Never",
            },
        ],
    }
    jobs = [
        cpu_job("a-low", "a", 6, priority="low"),
        cpu_job("b-low", "b", 6, priority="low"),
        cpu_job("a-high", "a", 6, at=10, priority="high"),
        cpu_job("b-high", "b", 6, at=10, priority="high"),
    ]
    result = run_case(policy, CPU_NODE, jobs)
    assert preempted_by(result) == {"a-low": [("a-high", "priority")]}
    assert state(result, "b-high") == "pending"
    assert state(result, "b-low") == "admitted"


def test_lend_and_dont_lend_strategies() -> None:
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "teams": [
            {"name": "lender", "quota": [{"resources": {"cpu": 4}}], "sharing": "Lend"},
            {"name": "hoarder", "quota": [{"resources": {"cpu": 4}}], "sharing": "DontLend"},
            {"name": "borrower", "quota": [{"resources": {"cpu": 4}}]},
        ],
    }
    jobs = [
        cpu_job("lender-big", "lender", 5),
        cpu_job("borrower-big", "borrower", 8, at=1),
        cpu_job("borrower-more", "borrower", 1, at=2),
    ]
    result = run_case(policy, CPU_NODE, jobs)
    # Lend never borrows; the borrower gets the lender's 4 but never the hoarder's.
    assert "strategy Lend does not borrow" in result["workloads"]["lender-big"]["pending_reason"]
    assert state(result, "borrower-big") == "admitted"
    assert result["workloads"]["borrower-big"]["borrowed"] == {"cpu": 4}
    assert state(result, "borrower-more") == "pending"


def test_idle_resource_sharing_makes_unallocated_capacity_borrowable() -> None:
    def policy(sharing: bool) -> dict[str, Any]:
        return {
            "cluster": {"idle_resource_sharing": sharing},
            "teams": [{"name": "a", "quota": [{"resources": {"cpu": 4}}]}],
        }

    jobs = [cpu_job("big", "a", 10)]
    assert state(run_case(policy(True), CPU_NODE, jobs), "big") == "admitted"
    off = run_case(policy(False), CPU_NODE, jobs)
    assert state(off, "big") == "pending"
    assert "not enough quota to borrow for cpu" in off["workloads"]["big"]["pending_reason"]


def test_percent_of_idle_limit_is_explained_with_numbers() -> None:
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "teams": [
            {
                "name": "a",
                "quota": [{"resources": {"nvidia.com/gpu": 2}}],
                "borrow_limits": [{"resource": "nvidia.com/gpu", "percent_of_idle": 50}],
            },
            {"name": "b", "quota": [{"resources": {"nvidia.com/gpu": 2}}]},
        ],
    }
    nodes = [{"name": "g", "count": 4, "allocatable": {"cpu": 8, "nvidia.com/gpu": 1}}]
    gpu = {"nvidia.com/gpu": 1}
    jobs = [
        {"name": "fits", "team": "a", "pods": 3, "requests": gpu},  # borrows 1 <= 50% of 2
        {"name": "too-much", "team": "a", "pods": 1, "requests": gpu, "at": 5},
    ]
    result = run_case(policy, nodes, jobs)
    assert state(result, "fits") == "admitted"
    assert result["workloads"]["too-much"]["pending_reason"] == (
        "borrow limit for nvidia.com/gpu on default: would borrow 2, limit 1 (50% of 2 idle)"
    )


def test_absolute_and_percent_of_quota_limits_the_tightest_wins() -> None:
    policy = {
        "teams": [
            {
                "name": "a",
                "quota": [{"resources": {"cpu": 4}}],
                "borrow_limits": [{"absolute": 3, "percent_of_quota": 50}],
            }
        ]
    }
    result = run_case(policy, CPU_NODE, [cpu_job("j", "a", 7)])
    assert result["workloads"]["j"]["pending_reason"] == (
        "borrow limit for cpu on default: would borrow 3, limit 2 (50% of quota 4)"
    )


def test_lending_limit_keeps_part_of_the_quota_private() -> None:
    """Kueue docs: with B's lendingLimit 1, A (9 CPU) can reach 10 while B idles."""
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "teams": [
            {"name": "a", "quota": [{"resources": {"cpu": 9}}]},
            {
                "name": "b",
                "quota": [{"resources": {"cpu": 12}}],
                "lending_limits": [{"absolute": 1}],
            },
        ],
    }
    nodes = [{"name": "n", "allocatable": {"cpu": 21}}]
    ok = run_case(policy, nodes, [cpu_job("a10", "a", 10)])
    assert state(ok, "a10") == "admitted"
    too_much = run_case(policy, nodes, [cpu_job("a11", "a", 11)])
    assert state(too_much, "a11") == "pending"


def test_large_job_does_not_block_smaller_ones_behind_it() -> None:
    policy = {"teams": [{"name": "a", "quota": [{"resources": {"cpu": 12}}]}]}
    policy["cluster"] = {"starvation_guard_seconds": None}
    jobs = [
        cpu_job("running", "a", 8),
        cpu_job("large", "a", 8, at=1),
        cpu_job("small", "a", 2, at=2),
    ]
    result = run_case(policy, CPU_NODE, jobs)
    assert state(result, "small") == "admitted"
    assert state(result, "large") == "pending"
    assert result["workloads"]["large"]["queue_position"] == 1


def test_starvation_guard_holds_back_later_work_until_the_large_job_fits() -> None:
    policy = {
        "cluster": {"starvation_guard_seconds": 60},
        "teams": [{"name": "a", "quota": [{"resources": {"cpu": 12}}]}],
    }
    jobs = [
        cpu_job("running", "a", 8, duration=100),
        cpu_job("large", "a", 8, at=1, duration=10),
        cpu_job("small-early", "a", 2, at=2, duration=1000),
        cpu_job("small-late", "a", 2, at=70, duration=1000),
    ]
    result = run_case(policy, CPU_NODE, jobs)
    wl = result["workloads"]
    assert wl["small-early"]["admitted_at"] == 2  # before the guard: no blocking
    assert wl["small-late"]["admitted_at"] == 100  # held at t=70 although 2 CPU were free
    assert wl["large"]["admitted_at"] == 100
    held = [
        e for e in result["events"] if e["event"] == "pending" and e["workload"] == "small-late"
    ]
    assert "held back for large" in held[0]["reason"]


def test_work_held_back_for_another_teams_job_is_not_told_its_name() -> None:
    """A workload's reason is read by its own team (``fleetshare job explain``): when the
    starvation guard holds it back for another team's job, the reason says so without
    naming that job or its team; for its own team's job it names it."""
    policy = {
        "cluster": {"starvation_guard_seconds": 60},
        "teams": [
            {"name": "team-a", "quota": [{"resources": {"cpu": 6}}]},
            {"name": "team-b", "quota": [{"resources": {"cpu": 6}}]},
        ],
    }
    jobs = [
        cpu_job("a-run", "team-a", 6, duration=100),
        cpu_job("b-large", "team-b", 8, at=1, duration=10),  # must borrow 2: starves
        cpu_job("a-late", "team-a", 2, at=70, duration=10),  # would borrow: held back
        cpu_job("b-late", "team-b", 2, at=71, duration=10),  # its own team's: held back too
    ]
    result = run_case(policy, CPU_NODE, jobs)
    assert result["workloads"]["b-large"]["admitted_at"] == 100

    def held(name: str) -> str:
        reasons = [
            e["reason"]
            for e in result["events"]
            if e["event"] == "pending" and e["workload"] == name and "held back" in e["reason"]
        ]
        assert reasons, result["events"]
        return str(reasons[0])

    assert "another team" in held("a-late")
    assert "b-large" not in held("a-late") and "team-b" not in held("a-late")
    assert "held back for b-large" in held("b-late")


def test_two_starving_jobs_never_hold_each_other_back() -> None:
    """Both wait past the guard behind a low-priority job that may not be preempted before
    t=100. Then the older one preempts it: the newer one's reservation does not hold it."""
    policy = {
        "cluster": {
            "starvation_guard_seconds": 60,
            "priority_classes": PRIORITIES,
            "preemption": {"min_runtime_seconds": 100},
        },
        "teams": [{"name": "a", "quota": [{"resources": {"cpu": 12}}], "sharing": "DontLend"}],
    }
    jobs = [
        cpu_job("batch", "a", 12, priority="low", duration=10_000),
        cpu_job("older", "a", 8, at=1, priority="mid", duration=50),
        cpu_job("newer", "a", 10, at=2, priority="mid", duration=50),
    ]
    wl = run_case(policy, CPU_NODE, jobs)["workloads"]
    assert wl["older"]["admitted_at"] == 100
    assert wl["batch"]["preemptions"][0] == {"at": 100, "by": "older", "reason": "priority"}
    # the newer one waits for the older (it would not fit beside it), then runs
    assert wl["newer"]["admitted_at"] == 150


def test_minimum_runtime_delays_priority_preemption() -> None:
    policy = {
        "cluster": {"priority_classes": PRIORITIES, "preemption": {"min_runtime_seconds": 100}},
        "teams": [{"name": "a", "quota": [{"resources": {"cpu": 12}}], "sharing": "DontLend"}],
    }
    jobs = [cpu_job("low", "a", 12, priority="low"), cpu_job("high", "a", 12, 30, priority="high")]
    result = run_case(policy, CPU_NODE, jobs)
    assert result["workloads"]["low"]["preemptions"] == [
        {"at": 100, "by": "high", "reason": "priority"}
    ]
    assert result["workloads"]["high"]["admitted_at"] == 100


def test_node_failure_requeues_its_workloads_and_capacity_shrinks() -> None:
    policy = {"teams": [{"name": "a", "quota": [{"resources": {"nvidia.com/gpu": 2}}]}]}
    nodes = [{"name": "g", "count": 2, "allocatable": {"cpu": 8, "nvidia.com/gpu": 1}}]
    jobs = [
        {"name": "j1", "team": "a", "requests": {"nvidia.com/gpu": 1}},
        {"name": "j2", "team": "a", "requests": {"nvidia.com/gpu": 1}},
    ]
    events = [{"at": 50, "action": "fail", "nodes": ["g-0"]}]
    result = run_case(policy, nodes, jobs, events=events)
    victims = {n for n, w in result["workloads"].items() if w["preemptions"]}
    assert len(victims) == 1
    (victim,) = victims
    assert result["workloads"][victim]["preemptions"][0]["reason"] == "node-failure"
    assert state(result, victim) == "preempted"
    assert "room for 0 of 1 pods" in result["workloads"][victim]["pending_reason"]
    assert any("quotas for nvidia.com/gpu" in w for w in result["warnings"])


def test_work_waiting_on_overcommitted_capacity_is_told_it_is_within_quota() -> None:
    """Quotas of 8 + 8 GPUs on one 8-GPU node: b uses its own 8, a's 1-GPU job is within a's
    quota and nothing is borrowed to reclaim, so it waits; the reason says that the wait is the
    over-commitment's, not a's; a job over a's quota is not told so."""
    policy = {
        "teams": [
            {"name": "a", "quota": [{"resources": {"nvidia.com/gpu": 8}}]},
            {"name": "b", "quota": [{"resources": {"nvidia.com/gpu": 8}}]},
        ]
    }
    nodes = [{"name": "g", "allocatable": {"cpu": 64, "nvidia.com/gpu": 8}}]
    jobs = [
        {"name": "b-all", "team": "b", "requests": {"nvidia.com/gpu": 8}},
        {"name": "a-one", "team": "a", "at": 1, "requests": {"nvidia.com/gpu": 1}},
        {"name": "a-nine", "team": "a", "at": 1, "requests": {"nvidia.com/gpu": 9}},
    ]
    result = run_case(policy, nodes, jobs)
    reason = result["workloads"]["a-one"]["pending_reason"]
    assert "room for 0 of 1 pods" in reason
    assert "within a's quota" in reason
    assert "add up to more than its Ready nodes offer" in reason
    assert "within a's quota" not in result["workloads"]["a-nine"]["pending_reason"]


def test_cordoned_node_stops_counting_but_keeps_running_work() -> None:
    policy = {"teams": [{"name": "a", "quota": [{"resources": {"cpu": 16}}]}]}
    nodes = [{"name": "n", "count": 2, "allocatable": {"cpu": 8}}]
    jobs = [cpu_job("running", "a", 8), cpu_job("later", "a", 8, at=20)]
    events = [
        {"at": 10, "action": "cordon", "nodes": ["n-1"]},
        {"at": 30, "action": "uncordon", "nodes": ["n-1"]},
    ]
    result = run_case(policy, nodes, jobs, events=events, until=25)
    assert state(result, "running") == "admitted"
    assert state(result, "later") == "pending"
    assert "room for 0 of 1 pods" in result["workloads"]["later"]["pending_reason"]
    assert any("offer 8" in w for w in result["warnings"])
    result = run_case(policy, nodes, jobs, events=events)
    assert result["workloads"]["later"]["admitted_at"] == 30


def test_gang_is_admitted_all_or_nothing() -> None:
    policy = {"teams": [{"name": "a", "quota": [{"resources": {"nvidia.com/gpu": 8}}]}]}
    nodes = [{"name": "g", "count": 3, "allocatable": {"cpu": 8, "nvidia.com/gpu": 1}}]
    jobs = [{"name": "gang", "team": "a", "pods": 4, "requests": {"nvidia.com/gpu": 1}}]
    result = run_case(policy, nodes, jobs)
    assert state(result, "gang") == "pending"
    assert result["teams"]["a"]["used"] == {}
    assert "room for 3 of 4 pods" in result["workloads"]["gang"]["pending_reason"]


def test_mig_partitions_are_capacity_and_quota() -> None:
    policy = {
        "teams": [
            {
                "name": "a",
                "quota": [
                    {
                        "instance_type": "p4d.24xlarge",
                        "accelerator_partition": {"type": "mig-1g.5gb", "count": 14},
                    }
                ],
                "sharing": "DontLend",
            }
        ]
    }
    nodes = [{"instance_type": "p4d.24xlarge", "mig": {"profile": "1g.5gb"}}]
    mig = {"nvidia.com/mig-1g.5gb": 1}
    jobs = [
        {"name": "fits", "team": "a", "pods": 14, "requests": mig},
        {"name": "over-quota", "team": "a", "pods": 1, "requests": mig, "at": 1},
    ]
    result = run_case(policy, nodes, jobs)
    assert state(result, "fits") == "admitted"
    # 14 of the 56 1g.5gb partitions a p4d.24xlarge offers: a quarter of its vCPU and memory
    # come with them ("ratio-based values for those parameters based on the accelerator
    # partition count you provide", SageMaker's AcceleratorPartitionConfig.Count)
    quota = result["teams"]["a"]["quota"]
    assert quota["nvidia.com/mig-1g.5gb"] == 14 and set(quota) == {
        "nvidia.com/mig-1g.5gb",
        "cpu",
        "memory",
    }
    instance = load_catalog().get("p4d.24xlarge").allocatable
    assert quota["cpu"] == pytest.approx(instance["cpu"] / 4 / 1000, abs=0.001)
    assert (
        "strategy DontLend does not borrow" in result["workloads"]["over-quota"]["pending_reason"]
    )


def test_mig_layout_per_gpu_is_capacity_as_operators_configure_nodes() -> None:
    """A p4d.24xlarge with GPUs 6-7 cut into 7 x 1g.5gb slices (mig-parted's layout), the rest
    whole: a 6-GPU job and 14 slice pods run side by side; a 7th whole GPU is not there."""
    quota = {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.5gb": 14}
    policy = {"teams": [{"name": "a", "quota": [{"resources": quota}]}]}
    layout = [{"devices": [6, 7], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]
    nodes = [{"name": "p4d", "instance_type": "p4d.24xlarge", "mig": {"layout": layout}}]
    jobs = [
        {"name": "six", "team": "a", "pods": 1, "requests": {"nvidia.com/gpu": 6}},
        {"name": "slices", "team": "a", "pods": 14, "requests": {"nvidia.com/mig-1g.5gb": 1}},
        {"name": "seventh", "team": "a", "pods": 1, "requests": {"nvidia.com/gpu": 1}},
    ]
    result = run_case(policy, nodes, jobs)
    assert state(result, "six") == "admitted"
    assert state(result, "slices") == "admitted"
    assert result["workloads"]["slices"]["placement"] == {"main": {"p4d": 14}}
    assert state(result, "seventh") == "pending"
    assert "room for 0 of 1 pods" in result["workloads"]["seventh"]["pending_reason"]


def test_mig_layout_that_does_not_fit_a_gpu_is_rejected_naming_the_node() -> None:
    policy = {"teams": [{"name": "a", "quota": [{"resources": {"nvidia.com/gpu": 8}}]}]}
    layout = [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.40gb": 1, "1g.5gb": 1}}]
    nodes = [{"name": "p4d", "instance_type": "p4d.24xlarge", "mig": {"layout": layout}}]
    with pytest.raises(ScenarioError, match=r"node p4d: mig: GPUs \[0\]: .* 8/7 compute"):
        run_case(policy, nodes, [])


def test_workloads_of_unknown_teams_are_rejected_when_the_scenario_loads() -> None:
    policy = {"teams": [{"name": "a", "quota": [{"resources": {"cpu": 4}}]}]}
    with pytest.raises(
        ScenarioError, match=r"workloads\[0\]\(x\)\.team: unknown team or queue 'nobody'"
    ):
        run_case(policy, CPU_NODE, [cpu_job("x", "nobody", 1)])


def test_same_input_gives_the_same_decisions() -> None:
    policy = {
        "cluster": {"priority_classes": PRIORITIES},
        "teams": [
            {"name": t, "quota": [{"resources": {"cpu": 4}}], "fair_share_weight": w}
            for t, w in (("a", 1), ("b", 2), ("c", 1))
        ],
    }
    jobs = [
        cpu_job(f"{t}{i}", t, 1 + i % 3, at=i, priority=p, duration=7 + i)
        for i in range(12)
        for t, p in (("a", "low"), ("b", "mid"), ("c", "high"))
    ]
    first = run_case(policy, CPU_NODE, jobs)
    second = run_case(policy, CPU_NODE, list(reversed(jobs)))
    assert first["workloads"] == second["workloads"]


def test_policy_change_is_applied_at_once() -> None:
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "teams": [{"name": "a", "quota": [{"resources": {"cpu": 4}}]}],
    }
    bigger = {
        "cluster": {"idle_resource_sharing": False},
        "teams": [{"name": "a", "quota": [{"resources": {"cpu": 8}}]}],
    }
    result = run_case(
        policy,
        CPU_NODE,
        [cpu_job("j", "a", 6)],
        policy_changes=[{"at": 50, "policy": bigger}],
    )
    assert result["workloads"]["j"]["admitted_at"] == 50
    assert [e["event"] for e in result["events"]].count("policy") == 1


def test_count_quota_needs_a_known_instance_type() -> None:
    import pytest

    from fleetshare.scenario.loader import ScenarioError

    policy = {"teams": [{"name": "a", "quota": [{"instance_type": "zz.large", "count": 1}]}]}
    with pytest.raises(ScenarioError, match=r"teams\[0\]\(a\)\.quota\[0\]: unknown instance type"):
        run_case(policy, CPU_NODE, [])


def test_starvation_guard_of_a_job_over_its_own_limit_does_not_hold_other_teams() -> None:
    """A job waiting for its own team's quota cannot be helped by holding others back."""
    policy = {
        "cluster": {"starvation_guard_seconds": 60, "fair_share": False},
        "teams": [
            {"name": "a", "quota": [{"resources": {"cpu": 4}}], "sharing": "Lend"},
            {"name": "b", "quota": [{"resources": {"cpu": 4}}]},
        ],
    }
    jobs = [
        cpu_job("a-running", "a", 4, duration=1000),
        cpu_job("a-waiting", "a", 4, at=1),
        cpu_job("b-borrow", "b", 6, at=100),
    ]
    result = run_case(policy, CPU_NODE, jobs)
    assert result["workloads"]["b-borrow"]["admitted_at"] == 100
    assert result["workloads"]["a-waiting"]["admitted_at"] == 1000


def test_group_borrowing_limit_caps_what_a_subtree_takes_from_outside() -> None:
    """Nested cohorts: research's teams share freely, but take at most 2 CPU from prod."""
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "groups": [
            {"name": "research", "borrow_limits": [{"resource": "cpu", "absolute": 2}]},
            {"name": "prod"},
        ],
        "teams": [
            {"name": "a", "group": "research", "quota": [{"resources": {"cpu": 4}}]},
            {"name": "b", "group": "research", "quota": [{"resources": {"cpu": 4}}]},
            {"name": "c", "group": "prod", "quota": [{"resources": {"cpu": 8}}]},
        ],
    }
    nodes = [{"name": "n", "allocatable": {"cpu": 16}}]
    assert state(run_case(policy, nodes, [cpu_job("j", "a", 10)]), "j") == "admitted"
    result = run_case(policy, nodes, [cpu_job("j", "a", 11)])
    assert state(result, "j") == "pending"
    assert "not enough quota to borrow for cpu" in result["workloads"]["j"]["pending_reason"]
    # prod's own team is not limited by research's cap
    assert state(run_case(policy, nodes, [cpu_job("k", "c", 16)]), "k") == "admitted"


@pytest.mark.parametrize(
    ("entry", "share", "accelerators"),
    [
        # "if you allocate 16 out of 32 total accelerators, SageMaker AI uses the ratio of 0.5
        # and allocates values to vCPU and MemoryInGiB" (ComputeQuotaResourceConfig.Accelerators)
        ({"accelerators": 4}, 0.5, 4),
        # "if you allocate 20 out of 40 total vCPU, SageMaker AI uses the ratio of 0.5 and
        # allocates values to MemoryInGiB. Accelerators are set to 0." (VCpu)
        ({"vcpu": "half"}, 0.5, 0),
        # "if you allocate 200 out of 400 total memory in GiB, SageMaker AI uses the ratio of
        # 0.5 and allocates values to vCPU. Accelerators are set to 0." (MemoryInGiB)
        ({"memory_gib": "half"}, 0.5, 0),
        # "ratio-based values for those parameters based on the accelerator partition count"
        # (AcceleratorPartitionConfig.Count): 14 of 8 GPUs x 7 slices
        ({"accelerator_partition": {"type": "mig-1g.5gb", "count": 14}}, 0.25, None),
    ],
)
def test_companion_amounts_follow_the_share_given(
    entry: dict[str, Any], share: float, accelerators: int | None
) -> None:
    catalog = load_catalog()
    whole = catalog.get("p4d.24xlarge").allocatable
    if entry.get("vcpu") == "half":
        entry = {"vcpu": whole["cpu"] / 2 / 1000}
    if entry.get("memory_gib") == "half":
        entry = {"memory_gib": whole["memory"] / 2 / 1000 / 2**30}
    out = resolve_entry(QuotaEntry(flavor="p4d.24xlarge", **entry), catalog)
    assert out["cpu"] == pytest.approx(whole["cpu"] * share, abs=1)
    assert out["memory"] == pytest.approx(whole["memory"] * share, rel=1e-6)
    assert out.get("nvidia.com/gpu") == (None if accelerators is None else accelerators * 1000)


def test_amounts_given_are_kept_and_only_the_missing_follow() -> None:
    catalog = load_catalog()
    out = resolve_entry(QuotaEntry(flavor="p4d.24xlarge", accelerators=4, vcpu=10), catalog)
    whole = catalog.get("p4d.24xlarge").allocatable
    assert out["cpu"] == 10_000 and out["memory"] == whole["memory"] // 2
    both = resolve_entry(QuotaEntry(flavor="p4d.24xlarge", vcpu=10, memory_gib=20), catalog)
    # both given: no ratio; accelerators 0 (an allocation naming none holds none)
    assert both == {"cpu": 10_000, "memory": 20 * 2**30 * 1000, "nvidia.com/gpu": 0}
    custom = resolve_entry(QuotaEntry(flavor="my-flavor", vcpu=10), catalog)
    assert custom == {"cpu": 10_000}  # a flavor the catalog does not know: as written
