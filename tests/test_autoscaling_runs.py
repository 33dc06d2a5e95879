"""The autoscaler inside scenario runs: what an admin sees in ``scenario run --json``."""

from __future__ import annotations

from typing import Any

from tests.conftest import run_case

GPU = "nvidia.com/gpu"
HOUR = 3600.0

POLICY: dict[str, Any] = {
    "cluster": {"idle_resource_sharing": True},
    "teams": [
        {"name": "research", "quota": [{"resources": {GPU: 8}}]},
        {
            "name": "product",
            "quota": [{"resources": {GPU: 4}}],
            "borrow_limits": [{"resource": GPU, "absolute": 0}],
        },
    ],
}
POOL: dict[str, Any] = {
    "name": "gpu",
    "families": ["g5", "g6"],
    "disruption": {"consolidate_after_seconds": 60},
}


def job(name: str, team: str, at: float, gpus: int, pods: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "team": team,
        "at": at,
        "pods": pods,
        "requests": {GPU: gpus, "cpu": 2 * gpus, "memory": f"{8 * gpus}Gi"},
        "duration": 1800,
        **extra,
    }


def scaled(workloads: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    extra.setdefault("node_pools", [POOL])
    extra.setdefault("cloud", {"seed": 1})
    return run_case(POLICY, [], workloads, **extra)


def launches(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in out["events"] if e["event"] == "launch"]


def test_nodes_are_launched_only_for_work_quota_would_admit() -> None:
    out = scaled([job("train", "research", 0, 4, pods=2), job("greedy", "product", 5, 8)])
    assert out["workloads"]["train"]["state"] == "finished"
    # product may not borrow: 8 GPUs is beyond its quota of 4 whatever the cluster size
    assert out["workloads"]["greedy"]["state"] == "pending"
    assert "borrow limit" in out["workloads"]["greedy"]["pending_reason"]
    gpus = sum(
        {"g6.12xlarge": 4, "g5.12xlarge": 4, "g6.2xlarge": 1, "g5.2xlarge": 1}.get(
            n["instance_type"], 0
        )
        for n in out["nodes"]
    )
    assert 8 <= gpus < 16, out["nodes"]


def test_the_cluster_scales_to_zero_and_the_cost_adds_up() -> None:
    out = scaled([job("a", "research", 0, 1), job("b", "research", 0, 4)])
    assert out["nodes"], "nodes were launched"
    assert all(n["termination_reason"] == "empty" for n in out["nodes"])
    # every node goes once it has been empty for the pool's consolidate-after (60 s)
    last_finish = max(w["finished_at"] for w in out["workloads"].values())
    assert all(n["terminated_at"] <= last_finish + 60 for n in out["nodes"])
    # the bill, computed independently: price x billed time per node (>= 60 s minimum)
    expected = sum(
        n["price_per_hour"] * max(60.0, n["terminated_at"] - n["launched_at"]) / HOUR
        for n in out["nodes"]
    )
    assert abs(out["cost"]["total_usd"] - expected) < 1e-3


def test_demand_arriving_together_is_planned_in_one_batch() -> None:
    work = [job(f"w{i}", "research", i * 0.5, 1) for i in range(4)]
    out = scaled(work)
    plans = [e for e in out["events"] if e["event"] == "autoscaler" and e["action"] == "plan"]
    assert len(plans) == 1
    assert plans[0]["workloads"] == 4
    # and launched 1 s after the last arrival (the idle window), not once per workload
    assert {e["at"] for e in launches(out)} == {2.5}


def test_launch_latency_is_the_time_to_capacity() -> None:
    out = scaled([job("a", "research", 0, 1)], cloud={"seed": 1, "launch_latency_seconds": 300})
    ttc = out["capacity"]["time_to_capacity"]
    assert ttc["workloads"] == 1
    assert ttc["p50_seconds"] == 301  # 1 s batching + 300 s launch latency
    assert out["workloads"]["a"]["admitted_at"] == 301


def test_pending_work_says_which_nodes_are_coming() -> None:
    out = scaled([job("a", "research", 0, 1)], until=50)
    reason = out["workloads"]["a"]["pending_reason"]
    assert "nodes launching for it" in reason and "ready at t=91" in reason


def test_an_offering_out_of_capacity_falls_back_to_the_next_choice() -> None:
    first = scaled([job("a", "research", 0, 1)])
    chosen = first["nodes"][0]
    limits = [
        {
            "instance_type": chosen["instance_type"],
            "zone": chosen["zone"],
            "capacity_type": "on-demand",
            "max": 0,
        }
    ]
    out = scaled([job("a", "research", 0, 1)], cloud={"seed": 1, "capacity_limits": limits})
    assert any(e["event"] == "autoscaler" and e["action"] == "ice" for e in out["events"])
    node = out["nodes"][0]
    assert (node["instance_type"], node["zone"]) != (chosen["instance_type"], chosen["zone"])
    assert out["workloads"]["a"]["state"] == "finished"


def test_spot_interruptions_requeue_work_and_capacity_comes_back() -> None:
    pool = {**POOL, "capacity_types": ["spot"]}
    out = scaled(
        [job("a", "research", 0, 1, duration=4 * HOUR)],
        node_pools=[pool],
        cloud={"seed": 3, "spot_interruption_rate_per_hour": 1.0},
    )
    interrupted = [n for n in out["nodes"] if n["termination_reason"] == "spot-interruption"]
    assert interrupted, "a 4 h job on spot at one interruption per hour is interrupted"
    record = out["workloads"]["a"]
    assert record["state"] == "finished"
    assert {p["reason"] for p in record["preemptions"]} == {"spot-interruption"}
    assert all(n["capacity_type"] == "spot" for n in out["nodes"])


def test_an_unhealthy_node_is_repaired_and_its_gang_requeued() -> None:
    out = scaled(
        [job("train", "research", 0, 4, pods=2)],
        autoscaler={"repair_after_seconds": 120},
        events=[{"at": 600, "action": "gpu-unhealthy", "nodes": ["gpu-g6.12xlarge-1"]}],
    )
    record = out["workloads"]["train"]
    assert [p["reason"] for p in record["preemptions"]] == ["node-failure"]
    assert record["state"] == "finished"
    by_name = {n["node"]: n for n in out["nodes"]}
    sick = by_name["gpu-g6.12xlarge-1"]
    assert sick["termination_category"] == "repair" and sick["terminated_at"] == 720
    assert "failing its health check for 120s" in sick["termination_reason"]
    # the requeued gang's lost capacity is replaced at once (one node: the healthy one
    # still has room for the other pod), not after the repair grace
    later = [n for n in out["nodes"] if n["launched_at"] > 1]
    assert [n["launched_at"] for n in later] == [601]
    assert later[0]["instance_type"] == sick["instance_type"]
    assert record["admitted_at"] == 601 + 90


def test_pool_limits_cap_the_launches() -> None:
    pool = {**POOL, "limits": {"nodes": 1}, "instance_types": ["g6.xlarge"]}
    out = scaled([job("a", "research", 0, 1), job("b", "research", 0, 1)], node_pools=[pool])
    starts = sorted(w["admitted_at"] for w in out["workloads"].values())
    assert len(out["nodes"]) >= 1
    # never more than one node alive at a time
    for node in out["nodes"]:
        overlapping = [
            n
            for n in out["nodes"]
            if n["launched_at"] < node["terminated_at"] and node["launched_at"] < n["terminated_at"]
        ]
        assert len(overlapping) == 1
    assert starts[1] >= starts[0] + 1800  # the second waited for the first to finish


def test_a_night_ceiling_holds_work_until_morning_and_a_floor_warms_up() -> None:
    night = {"schedule": "0 20 * * *", "duration_seconds": 12 * HOUR, "max_nodes": 0}
    warm = {
        "schedule": "0 8 * * 1-5",
        "duration_seconds": 9 * HOUR,
        "min_nodes": 1,
        "instance_type": "g6.xlarge",
    }
    pool = {**POOL, "schedules": [night, warm]}
    # t=0 is Monday 00:00 UTC: at 02:00 it is night; the ceiling lifts at 08:00
    out = scaled([job("a", "research", 2 * HOUR, 1)], node_pools=[pool], until=20 * HOUR)
    assert out["workloads"]["a"]["admitted_at"] >= 8 * HOUR
    floor = [n for n in out["nodes"] if n["launch_reason"].startswith("scheduled floor")]
    assert floor and floor[0]["launched_at"] == 8 * HOUR
    # the floor ends at 17:00: the warm node is then removed once empty
    assert 17 * HOUR <= floor[0]["terminated_at"] <= 17 * HOUR + 60


G6 = {**POOL, "families": ["g6"]}


def _consolidation_case(small_labels: dict[str, str], policy: str) -> dict[str, Any]:
    pool = {**G6, "disruption": {"consolidate_after_seconds": 60, "consolidation_policy": policy}}
    return scaled(
        [
            job("big", "research", 0, 3, duration=600),
            job("small", "research", 10, 1, duration=6 * HOUR, labels=small_labels),
        ],
        node_pools=[pool],
    )


def test_an_underused_node_is_replaced_by_a_cheaper_one() -> None:
    out = _consolidation_case({}, "WhenEmptyOrUnderutilized")
    first = out["nodes"][0]
    assert first["instance_type"] == "g6.12xlarge"  # 3 GPUs: the 4-GPU size, small joins it
    assert first["termination_reason"].startswith("replace")
    replacement = [n for n in out["nodes"] if n["launch_reason"].startswith("replace")]
    assert [n["instance_type"] for n in replacement] == ["g6.xlarge"]
    # the old node goes only once the replacement is Ready, then small moves over
    assert first["terminated_at"] == replacement[0]["ready_at"]
    small = out["workloads"]["small"]
    assert small["state"] == "finished"
    assert first["termination_category"] == "consolidation"
    assert [p["reason"] for p in small["preemptions"]] == ["consolidation"]
    # the eviction's event carries the node's full reason
    [evicted] = [e for e in out["events"] if e["event"] == "preempt" and e["workload"] == "small"]
    assert evicted["message"] == first["termination_reason"]
    kept = _consolidation_case({}, "WhenEmpty")
    assert out["cost"]["total_usd"] < 0.5 * kept["cost"]["total_usd"]


def test_running_training_is_not_disrupted_to_save_money() -> None:
    out = _consolidation_case({"fleetshare.io/kind": "training"}, "WhenEmptyOrUnderutilized")
    assert [n["instance_type"] for n in out["nodes"]] == ["g6.12xlarge"]
    assert out["workloads"]["small"]["preemptions"] == []
    # ...unless it is marked preemptible and the saving is worth it (75% here)
    labels = {"fleetshare.io/kind": "training", "fleetshare.io/preemptible": "true"}
    out = _consolidation_case(labels, "WhenEmptyOrUnderutilized")
    assert len(out["workloads"]["small"]["preemptions"]) == 1


def test_headroom_keeps_warm_capacity_so_bursts_start_at_once() -> None:
    headroom = [{"requests": {GPU: 1, "cpu": 2, "memory": "8Gi"}, "count": 1}]
    out = scaled(
        [job("burst", "research", 600, 1, duration=600)],
        autoscaler={"headroom": headroom},
        until=3 * HOUR,
    )
    record = out["workloads"]["burst"]
    assert record["admitted_at"] == 600  # no launch latency: the warm node was there
    warm = [n for n in out["nodes"] if n["launched_at"] == 0]
    assert len(warm) == 1 and warm[0]["terminated_at"] is None  # kept, though empty for hours
    # once the burst took the room, new headroom was launched right away
    assert any(n["launched_at"] == 600 for n in out["nodes"])
    assert len([n for n in out["nodes"] if n["terminated_at"] is None]) == 1


def test_launches_stay_within_the_accounts_vcpu_quota_and_the_rest_waits_its_turn() -> None:
    # "Running On-Demand G and VT instances" at 16 vCPUs: at most two 8-vCPU nodes at once
    pool = {**POOL, "instance_types": ["g6.2xlarge"], "capacity_types": ["on-demand"]}
    cloud = {"seed": 1, "service_quotas": [{"group": "G", "max_vcpus": 16}]}
    work = [job(f"j{i}", "research", 0, 1) for i in range(4)]
    out = scaled(work, node_pools=[pool], cloud=cloud)
    assert all(w["state"] == "finished" for w in out["workloads"].values())
    nodes = out["nodes"]
    for n in nodes:
        alive = [m for m in nodes if m["launched_at"] <= n["launched_at"] < m["terminated_at"]]
        assert len(alive) <= 2, alive
    # the last two waited for the first two to finish and ran on the same nodes; no launch
    # was refused by the cloud (the plan knew the quota)
    assert len(nodes) == 2
    assert not [e for e in out["events"] if e.get("action") == "account-limit"]
    starts = sorted(w["admitted_at"] for w in out["workloads"].values())
    assert starts[2] >= starts[0] + 1800


def test_work_past_the_accounts_quota_says_which_quota_blocks_it() -> None:
    pool = {**POOL, "instance_types": ["g6.12xlarge"], "capacity_types": ["on-demand"]}
    cloud = {"seed": 1, "service_quotas": [{"group": "G", "max_vcpus": 32}]}
    out = scaled([job("big", "research", 0, 4)], node_pools=[pool], cloud=cloud)
    reason = out["workloads"]["big"]["pending_reason"]
    assert out["workloads"]["big"]["state"] == "pending"
    assert "Running On-Demand G and VT instances" in reason, reason
    assert out["nodes"] == []


def test_a_job_no_node_can_be_bought_for_does_not_hold_the_quota_of_the_work_behind_it() -> None:
    # research's quota is 8 GPUs; the pool may hold 4. The 8-GPU gang can never get nodes, so
    # the 1-GPU job submitted after it must not wait behind it for quota it will never use.
    pool = {**POOL, "limits": {GPU: 4}}
    policy = {"teams": [{"name": "research", "quota": [{"resources": {GPU: 8}}]}]}
    work = [job("huge", "research", 0, 4, pods=2), job("small", "research", 5, 1)]
    out = run_case(policy, [], work, node_pools=[pool], cloud={"seed": 1})
    assert out["workloads"]["small"]["state"] == "finished"
    huge = out["workloads"]["huge"]
    assert huge["state"] == "pending"
    assert "limit" in huge["pending_reason"] and "gpu" in huge["pending_reason"]
    # and no node was bought for part of the gang
    assert all(n["instance_type"] not in ("g6.12xlarge", "g5.12xlarge") for n in out["nodes"])


def test_a_pool_node_limit_counts_nodes_not_milli_nodes() -> None:
    """A pool limited to 3 nodes keeps adding nodes for later demand up to 3 (its usage was
    once counted in milli-nodes against a limit in nodes, so a pool stopped at one node)."""
    pool = {**POOL, "families": ["g6"], "instance_types": ["g6.xlarge"], "limits": {"nodes": 3}}
    jobs = [job(f"j{i}", "research", 600 * i, 1) for i in range(5)]
    for j in jobs:
        j["duration"] = 7200
    out = scaled(jobs, node_pools=[pool])
    assert len(out["nodes"]) == 3
    assert [n["launched_at"] for n in out["nodes"]] == [1.0, 601.0, 1201.0]
    admitted = {name: w["admitted_at"] for name, w in out["workloads"].items()}
    assert admitted["j3"] is not None and admitted["j3"] > 7200  # waited for a node to free up
    # while it waits, it says which limit keeps nodes from being bought for it
    waiting = scaled(jobs, node_pools=[pool], until=3000)
    reason = waiting["workloads"]["j3"]["pending_reason"]
    assert "node pool 'gpu' limit nodes (3 nodes, 3 in use)" in reason, reason
