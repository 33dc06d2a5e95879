"""A flavor per pod set, as Kueue assigns flavors (``governance/flavors.py``).

Kueue's flavor assigner, for each pod set in order, takes the first flavor in the
ClusterQueue's order that the pod set's node selector, affinity and tolerations admit and whose
quota can take it on top of the pod sets assigned before it (default fungibility: borrowing is
fine, a flavor that would need preemption is passed over). These cases are written from those
semantics: a job whose driver and workers select different flavors runs on both, charged per
flavor; pod sets no flavor admits wait with a reason naming the pod set; work whose pod sets all
admit the same flavors keeps one flavor, as before.
"""

from __future__ import annotations

from typing import Any

from fleetshare.governance.admission import Engine
from fleetshare.governance.demand import admissible_demand
from fleetshare.governance.snapshot import CycleResult, Running, Snapshot
from fleetshare.governance.state import CycleState
from fleetshare.model.node import Node, Taint, Toleration
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import load_policy
from fleetshare.scenario.planning import shapes_after_existing

GPU = "nvidia.com/gpu"
MILLI = 1000
GPU_TAINT = Taint("nvidia.com/gpu", "", "NoSchedule")
TOLERATE_GPU = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)


def policy(
    quotas: dict[str, dict[str, int]], flavors: dict[str, dict[str, str]], **team: Any
) -> dict[str, Any]:
    """One team ``ml`` with ``quotas`` per flavor (in that order), which it may not exceed."""
    return {
        "cluster": {
            "flavors": [{"name": f, "node_labels": labels} for f, labels in flavors.items()],
            "starvation_guard_seconds": None,
        },
        "teams": [
            {
                "name": "ml",
                "quota": [{"flavor": f, "resources": r} for f, r in quotas.items()],
                "sharing": "DontLend",
                **team,
            }
        ],
    }


CPU_GPU = {"cpu-pool": {"pool": "cpu"}, "gpu-pool": {"pool": "gpu"}}


def cpu_gpu_nodes() -> list[Node]:
    return [
        Node("cpu-1", {"cpu": 16 * MILLI, "memory": 64 * 2**30 * MILLI}, labels={"pool": "cpu"}),
        Node(
            "gpu-1",
            {"cpu": 48 * MILLI, "memory": 384 * 2**30 * MILLI, GPU: 8 * MILLI},
            labels={"pool": "gpu"},
            taints=(GPU_TAINT,),
        ),
    ]


def driver(cpu: int = 4, selector: dict[str, str] | None = None) -> PodSet:
    chosen = {"pool": "cpu"} if selector is None else selector
    return PodSet("driver", 1, {"cpu": cpu * MILLI}, chosen)


def workers(count: int = 2, gpus: int = 4, pool: str = "gpu") -> PodSet:
    return PodSet(
        "workers",
        count,
        {"cpu": 8 * MILLI, GPU: gpus * MILLI},
        {"pool": pool},
        TOLERATE_GPU,
    )


def job(name: str, *podsets: PodSet, at: float = 0.0) -> Workload:
    return Workload(name=name, team="ml", podsets=podsets, submit_time=at)


CPU_GPU_QUOTA = {
    "cpu-pool": {"cpu": 16, GPU: 0},
    "gpu-pool": {"cpu": 48, GPU: 8},
}


def cycle(
    engine: Engine, nodes: list[Node], pending: list[Workload], running: list[Running] = ()
) -> CycleResult:  # type: ignore[assignment]
    return engine.cycle(Snapshot(100.0, nodes, list(running), pending))


def both_ways(policy_data: dict[str, Any], nodes: list[Node], pending: list[Workload]) -> Any:
    """The decisions with the shortcuts and without (they must agree)."""
    out = []
    for shortcuts in (True, False):
        engine = Engine(load_policy(policy_data))
        engine.shortcuts = shortcuts
        result = cycle(engine, nodes, pending)
        out.append(
            (
                [(a.workload.name, a.assignment) for a in result.admissions],
                [(n, p.reason) for n, p in result.pending.items()],
            )
        )
    assert out[0] == out[1]
    return out[0]


def test_driver_and_workers_run_on_their_own_flavors_charged_per_flavor() -> None:
    """The Ray/Spark shape: a CPU driver selecting the CPU pool, GPU workers selecting the
    (tainted) GPU pool. No flavor holds both; Kueue admits it with a flavor per pod set."""
    engine = Engine(load_policy(policy(CPU_GPU_QUOTA, CPU_GPU)))
    nodes = cpu_gpu_nodes()
    wl = job("ray", driver(), workers())
    result = cycle(engine, nodes, [wl])
    [admission] = result.admissions
    assert admission.assignment.flavors == ("cpu-pool", "gpu-pool")
    assert admission.assignment.placement == ((("cpu-1", 1),), (("gpu-1", 2),))
    assert admission.borrowed == {}

    # charged per flavor: the driver's cpu to cpu-pool, the workers' cpu and GPUs to gpu-pool
    running = Running(wl, admission.assignment, 100.0)
    state = CycleState(engine.model, engine.policy.cluster, Snapshot(100.0, nodes, [running], []))
    assert state.tree.usage("ml", ("cpu-pool", "cpu")) == 4 * MILLI
    assert state.tree.usage("ml", ("cpu-pool", GPU)) == 0
    assert state.tree.usage("ml", ("gpu-pool", "cpu")) == 16 * MILLI
    assert state.tree.usage("ml", ("gpu-pool", GPU)) == 8 * MILLI

    # so a CPU job needing 14 of cpu-pool's 16 cpu waits, its reason naming cpu-pool, and
    # another such Ray job waits for the GPUs, its reason naming the workers
    etl = job("etl", driver(14), at=1)
    again = job("ray-2", driver(), workers(), at=2)
    later = cycle(engine, nodes, [etl, again], [running])
    assert later.admissions == []
    assert "needs 14 cpu on cpu-pool but only 12 of quota 16 is unused" in (
        later.pending["etl"].reason
    )
    assert later.pending["ray-2"].reason.startswith(
        "pod set 'workers': needs 8 nvidia.com/gpu on gpu-pool"
    )


def test_a_pod_set_no_flavor_admits_waits_naming_the_pod_set() -> None:
    """Kueue: no flavor matches the pod set's node affinity; the workload stays pending."""
    data = policy(CPU_GPU_QUOTA, CPU_GPU)
    wl = job("tpu-job", driver(), workers(pool="tpu"))
    _, pending = both_ways(data, cpu_gpu_nodes(), [wl])
    [(name, reason)] = pending
    assert name == "tpu-job"
    assert reason == (
        "no Ready, schedulable node matching {'pool': 'tpu'} admits pod set 'workers' "
        "(labels, affinity, taints)"
    )


def test_pod_sets_that_fit_no_flavor_quota_wait_naming_the_pod_set() -> None:
    """Each pod set has a flavor, but the workers' quota cannot take them: pending, the
    reason naming the pod set and the flavor it was short on."""
    quotas = {"cpu-pool": {"cpu": 16, GPU: 0}, "gpu-pool": {"cpu": 48, GPU: 4}}
    _, pending = both_ways(
        policy(quotas, CPU_GPU), cpu_gpu_nodes(), [job("ray", driver(), workers())]
    )
    [(_, reason)] = pending
    assert reason.startswith("pod set 'workers': needs 8 nvidia.com/gpu on gpu-pool")


def test_one_flavor_holding_every_pod_set_is_kept() -> None:
    """Pod sets admitted by the same flavors stay on one flavor, the first whose quota takes
    them all (as before pod sets could differ)."""
    flavors = {"a": {"pool": "a"}, "b": {"pool": "b"}}
    quotas = {"a": {"cpu": 6}, "b": {"cpu": 16}}
    nodes = [
        Node("na", {"cpu": 16 * MILLI}, labels={"pool": "a"}),
        Node("nb", {"cpu": 16 * MILLI}, labels={"pool": "b"}),
    ]
    wl = job(
        "spark", PodSet("driver", 1, {"cpu": 4 * MILLI}), PodSet("exec", 2, {"cpu": 2 * MILLI})
    )
    admitted, _ = both_ways(policy(quotas, flavors), nodes, [wl])
    [(_, assignment)] = admitted
    assert assignment.flavors == ("b", "b")  # 8 cpu: not within a's 6, so b for both


def test_each_pod_set_takes_the_first_flavor_whose_quota_takes_it_after_the_earlier_ones() -> None:
    """The driver may run on a or b, the workers on a, b or c (pod sets admitted by different
    flavors). Neither a nor b holds both (7 cpu > 4). Kueue: the driver takes a (3 of 4), then
    the workers would fit a alone (4) but not after the driver (7), so they take b."""
    flavors = {"a": {"zone": "a"}, "b": {"zone": "b"}, "c": {"zone": "c"}}
    quotas = {"a": {"cpu": 4}, "b": {"cpu": 4}, "c": {"cpu": 8}}
    nodes = [
        Node("na", {"cpu": 16 * MILLI}, labels={"zone": "a", "tier": "x"}),
        Node("nb", {"cpu": 16 * MILLI}, labels={"zone": "b", "tier": "x"}),
        Node("nc", {"cpu": 16 * MILLI}, labels={"zone": "c"}),
    ]
    wl = job(
        "mixed",
        PodSet("driver", 1, {"cpu": 3 * MILLI}, {"tier": "x"}),
        PodSet("workers", 2, {"cpu": 2 * MILLI}),
    )
    admitted, _ = both_ways(policy(quotas, flavors), nodes, [wl])
    [(_, assignment)] = admitted
    assert assignment.flavors == ("a", "b")


def test_a_flavor_holding_every_pod_set_comes_before_a_split() -> None:
    """The driver may run on either pool, the workers only on the GPU pool: the GPU pool holds
    both and is tried first (Kueue would put the driver on the CPU pool, first in the order);
    when its quota cannot take the driver, Kueue's split assignment follows."""
    nodes = cpu_gpu_nodes()
    free_driver = driver(selector={})
    wl = job("ray", PodSet(**{**_fields(free_driver), "tolerations": TOLERATE_GPU}), workers())
    roomy = both_ways(policy(CPU_GPU_QUOTA, CPU_GPU), nodes, [wl])[0]
    assert [a.flavors for _, a in roomy] == [("gpu-pool", "gpu-pool")]
    tight = {"cpu-pool": {"cpu": 16, GPU: 0}, "gpu-pool": {"cpu": 16, GPU: 8}}
    split = both_ways(policy(tight, CPU_GPU), nodes, [wl])[0]
    assert [a.flavors for _, a in split] == [("cpu-pool", "gpu-pool")]


def _fields(ps: PodSet) -> dict[str, Any]:
    return {
        "name": ps.name,
        "count": ps.count,
        "requests": ps.requests,
        "node_selector": ps.node_selector,
        "tolerations": ps.tolerations,
        "affinity": ps.affinity,
    }


def test_many_split_jobs_decide_alike_with_and_without_shortcuts() -> None:
    """A queue of split jobs (one shape) and CPU jobs: the shape-failure memo and the key-order
    path give the plain algorithm's decisions and reasons."""
    pending = [job(f"ray-{i}", driver(), workers(1, 2), at=i) for i in range(8)]
    pending += [job(f"cpu-{i}", driver(3), at=i + 0.5) for i in range(8)]
    admitted, reasons = both_ways(policy(CPU_GPU_QUOTA, CPU_GPU), cpu_gpu_nodes(), pending)
    names = [name for name, _ in admitted]
    assert names[:4] == ["ray-0", "cpu-0", "ray-1", "cpu-1"]
    assert all(a.flavors == ("cpu-pool", "gpu-pool") for n, a in admitted if n.startswith("ray"))
    assert len(reasons) == len(pending) - len(admitted)


def test_the_autoscaler_sees_split_demand_per_pod_set() -> None:
    """Quota-aware demand assigns flavors per pod set too: the driver's pods are bought in the
    CPU pool, the workers' in the GPU pool."""
    engine = Engine(load_policy(policy(CPU_GPU_QUOTA, CPU_GPU)))
    wl = job("ray", driver(), workers())
    demand, blocked = admissible_demand(engine, Snapshot(0.0, [], [], [wl]))
    assert blocked == {}
    [item] = demand
    assert item.flavors == ("cpu-pool", "gpu-pool")
    assert item.node_selectors == ({"pool": "cpu"}, {"pool": "gpu"})
    tpu = job("tpu", driver(), workers(pool="tpu"))
    _, blocked = admissible_demand(engine, Snapshot(0.0, [], [], [tpu]))
    assert blocked == {"tpu": "no flavor matches the node selector of pod set 'workers'"}


def test_the_plan_command_places_a_driver_and_workers_on_two_instance_types() -> None:
    """``fleetshare plan`` fills existing nodes first: a CPU driver on the m5 node and GPU
    workers on the p4d node fit now (the p4d node alone has no room for the driver too); no
    node is planned for them."""
    nodes = [
        Node("cpu", {"cpu": 64 * MILLI}, instance_type="m5.16xlarge"),
        Node("gpu", {"cpu": 48 * MILLI, GPU: 8 * MILLI}, instance_type="p4d.24xlarge"),
    ]
    wl = job(
        "ray",
        PodSet("driver", 1, {"cpu": 40 * MILLI}),
        PodSet("workers", 2, {"cpu": 8 * MILLI, GPU: 4 * MILLI}),
    )
    shapes, fits_now = shapes_after_existing([wl], nodes)
    assert (shapes, fits_now) == ([], ["ray"])
