"""GPU share packing: feasibility, allocation, policies, fragmentation, the Alibaba loader."""

from __future__ import annotations

import numpy as np
import pytest

from fleetshare.placement.gpu_share import (
    FGD,
    POLICIES,
    GpuCluster,
    GpuNode,
    Placement,
    PodShape,
    TaskDistribution,
    allocate,
    feasible,
    fragmentation,
    gpu_allocation_ratio,
    make_policy,
    node_fragmentation,
    place,
    release,
    schedule,
)
from fleetshare.traces.openb import (
    DEFAULT_POD_FILE,
    NODE_FILE,
    load_cluster,
    load_pods,
    pod_shape,
    task_distribution,
)

from .conftest import TRACE_DATA

ALIBABA = TRACE_DATA / "alibaba-gpu-v2023"


def nodes(*gpus: int, model: str = "T4", cpu: int = 64_000, mem: int = 256_000) -> GpuCluster:
    """Nodes with the given GPU counts, all of one model and size."""
    return GpuCluster([GpuNode(f"n{i}", cpu, mem, g, model) for i, g in enumerate(gpus)])


def share(milli: int, cpu: int = 1000, mem: int = 1000, models: str = "") -> PodShape:
    return PodShape(cpu, mem, gpu_milli=milli, gpu_models=PodShape.parse_gpu_spec(models))


def whole(k: int, cpu: int = 1000, mem: int = 1000, models: str = "") -> PodShape:
    return PodShape(cpu, mem, num_gpu=k, gpu_models=PodShape.parse_gpu_spec(models))


def policies(dist: TaskDistribution | None = None) -> list[str | FGD]:
    dist = dist or TaskDistribution((share(500), whole(1)), (1, 1))
    return [*[p for p in POLICIES if p != "fgd"], FGD(dist)]


# -- shapes and feasibility ----------------------------------------------------------------------


def test_pod_shape_validation() -> None:
    with pytest.raises(ValueError):
        PodShape(1000, 1000, num_gpu=1, gpu_milli=500)
    with pytest.raises(ValueError):
        PodShape(1000, 1000, gpu_milli=1000)
    assert PodShape.parse_gpu_spec(" V100M32|V100M16|") == ("V100M16", "V100M32")
    assert whole(2).gpu_request_milli == 2000 and share(250).gpu_request_milli == 250


def test_fractional_pod_never_straddles_gpus() -> None:
    cluster = nodes(2)
    allocate(cluster, share(400), Placement(0, (0,)))
    allocate(cluster, share(400), Placement(0, (1,)))
    # 1,200 milli free on the node, but no single GPU has 700.
    assert not feasible(cluster, share(700)).any()
    for policy in policies():
        assert place(cluster, share(700), policy) is None
    with pytest.raises(ValueError):
        allocate(cluster, share(700), Placement(0, (0,)))


@pytest.mark.parametrize("seed", range(3))
def test_random_packing_keeps_every_gpu_within_bounds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shapes = [share(m) for m in (100, 250, 460, 650, 810)] + [whole(1), whole(2), whole(4)]
    for policy in policies():
        cluster = nodes(1, 2, 4, 8, 2)
        for _ in range(60):
            pod = shapes[int(rng.integers(len(shapes)))]
            placement = schedule(cluster, pod, policy)
            if placement is None:
                continue
            assert len(placement.gpus) == (pod.num_gpu or 1)
        assert (cluster.gpu_free >= 0).all() and (cluster.gpu_free <= 1000).all()
        padding = np.arange(cluster.gpu_free.shape[1])[None, :] >= cluster.num_gpus[:, None]
        assert (cluster.gpu_free[padding] == 0).all()


def test_whole_gpu_pods_need_fully_free_gpus() -> None:
    cluster = nodes(2)
    allocate(cluster, share(100), Placement(0, (0,)))
    assert not feasible(cluster, whole(2)).any()
    for policy in policies():
        assert place(cluster, whole(1), policy) == Placement(0, (1,))
    with pytest.raises(ValueError):
        allocate(cluster, whole(1), Placement(0, (0,)))


def test_gpu_spec_constraints_are_honoured() -> None:
    cluster = GpuCluster(
        [
            GpuNode("t4", 64_000, 256_000, 8, "T4"),
            GpuNode("v100", 64_000, 256_000, 8, "V100M32"),
            GpuNode("cpu", 64_000, 256_000, 0, ""),
        ]
    )
    for policy in policies():
        c = cluster.copy()
        for _ in range(8):
            assert schedule(c, whole(1, models="V100M16|V100M32"), policy) is not None
        assert place(c, whole(1, models="V100M16|V100M32"), policy) is None
        assert (c.gpu_free[0] == 1000).all() and (c.gpu_free[1] == 0).all()
        assert place(c, share(100, models="V100M16|V100M32"), policy) is None
        assert place(c, share(100, models="T4"), policy) == Placement(0, (0,))
    assert feasible(cluster, whole(1, models="A100")).sum() == 0
    with pytest.raises(ValueError):
        allocate(cluster, whole(1, models="T4"), Placement(1, (0,)))


def test_release_restores_capacity_exactly() -> None:
    cluster = nodes(2, 4, 8)
    before = {k: getattr(cluster, k).copy() for k in ("gpu_free", "cpu_free", "mem_free")}
    summaries = [cluster.free_total.copy(), cluster.full_count.copy(), cluster.max_free.copy()]
    rng = np.random.default_rng(7)
    placed: list[tuple[PodShape, Placement]] = []
    shapes = [share(130), share(470), share(810), whole(1), whole(2), PodShape(3000, 4000)]
    for _ in range(40):
        pod = shapes[int(rng.integers(len(shapes)))]
        placement = schedule(cluster, pod, "best_fit")
        if placement is not None:
            placed.append((pod, placement))
    assert gpu_allocation_ratio(cluster) > 0.5
    for j in rng.permutation(len(placed)).tolist():
        release(cluster, *placed[j])
    for key, value in before.items():
        np.testing.assert_array_equal(getattr(cluster, key), value)
    np.testing.assert_array_equal(cluster.free_total, summaries[0])
    np.testing.assert_array_equal(cluster.full_count, summaries[1])
    np.testing.assert_array_equal(cluster.max_free, summaries[2])
    with pytest.raises(ValueError):
        release(cluster, share(100), Placement(0, (0,)))


# -- policies ------------------------------------------------------------------------------------


def test_best_fit_fills_partly_used_gpus_before_fresh_ones() -> None:
    cluster = nodes(2, 2)
    allocate(cluster, share(500), Placement(1, (1,)))
    assert place(cluster, share(300), "best_fit") == Placement(1, (1,))
    # Within a node: the fullest GPU that still fits.
    cluster = nodes(4)
    allocate(cluster, share(200), Placement(0, (2,)))
    allocate(cluster, share(700), Placement(0, (3,)))
    assert place(cluster, share(300), "best_fit") == Placement(0, (3,))
    assert place(cluster, share(600), "best_fit") == Placement(0, (2,))


def test_dot_product_follows_the_fgd_papers_definition() -> None:
    # (CPU, GPU) over virtual nodes, divided by the largest node (64 cores, 4 GPUs):
    # a fraction on node 0's free pair scores 1/64 + 0.075 * 0.5, on node 1's free four
    # 1/64 + 0.075 * 1: node 0, its first free GPU
    cluster = nodes(2, 4)
    assert place(cluster, share(300), "dot_product") == Placement(0, (0,))
    # a partly used GPU is its own virtual node: 500m free on node 1 scores
    # 1/64 * 63/64 + 0.075 * 500/4000, below node 0's free pair
    allocate(cluster, share(500), Placement(1, (1,)))
    assert place(cluster, share(300), "dot_product") == Placement(1, (1,))
    # whole GPUs see only the fully free ones: 2 on node 0 (0.5 * 0.5) beat 3 on node 1
    assert place(cluster, whole(2), "dot_product") == Placement(0, (0, 1))
    # memory is not a dimension: equal CPU and GPU, the lower node index wins
    cluster = GpuCluster(
        [GpuNode("a", 64_000, 1_000_000, 2, "T4"), GpuNode("b", 64_000, 9_000, 2, "T4")]
    )
    assert place(cluster, share(300, mem=8_000), "dot_product") == Placement(0, (0,))


def test_first_fit_takes_the_first_node_and_gpu() -> None:
    cluster = nodes(2, 2)
    allocate(cluster, share(500), Placement(1, (1,)))
    assert place(cluster, share(300), "first_fit") == Placement(0, (0,))


def test_fgd_avoids_stranding_a_fraction_no_task_can_use() -> None:
    # Every task of the workload wants 600m of one GPU. Node a has 700m free, node b 1000m.
    # A 300m pod on a would leave 400m there that no task can use; on b it leaves 700m.
    dist = TaskDistribution((share(600),), (1,))
    cluster = nodes(1, 1)
    allocate(cluster, share(300), Placement(0, (0,)))
    fgd = FGD(dist)
    assert place(cluster, share(300), "best_fit") == Placement(0, (0,))
    assert place(cluster, share(300), fgd) == Placement(1, (0,))

    placed = {}
    for policy in ("best_fit", fgd):
        c = cluster.copy()
        schedule(c, share(300), policy)
        name = policy if isinstance(policy, str) else policy.name
        # best-fit strands 400m on node a; FGD leaves 700m on both nodes.
        assert fragmentation(c, dist) == (400 if name == "best_fit" else 0)
        placed[name] = sum(schedule(c, share(600), policy) is not None for _ in range(3))
    assert placed == {"best_fit": 1, "fgd": 2}


def test_node_fragmentation_follows_the_definition() -> None:
    cluster = GpuCluster([GpuNode("n", 8000, 64_000, 2, "T4")])
    allocate(cluster, share(700), Placement(0, (1,)))  # free GPUs: [1000, 300]
    dist = TaskDistribution((whole(1), share(500), share(200, cpu=9000)), (2, 1, 1))
    # whole(1) fits; the 300m GPU is unusable to it. share(500) fits; 300m unusable.
    # share(200, cpu=9000) does not fit the node's CPU: all 1300m are unusable.
    expected = (2 * 300 + 1 * 300 + 1 * 1300) / 4
    assert node_fragmentation(cluster, dist)[0] == pytest.approx(expected)
    np.testing.assert_allclose(dist.probabilities, [0.5, 0.25, 0.25])


def test_fgd_cache_matches_brute_force_after_outside_changes() -> None:
    rng = np.random.default_rng(3)
    shapes = [share(m) for m in (120, 330, 470, 810)] + [whole(1), whole(2)]
    dist = TaskDistribution(tuple(shapes), (5, 3, 4, 2, 6, 1))
    cluster = nodes(2, 4, 8, 4, 1)
    fgd = FGD(dist)
    held: list[tuple[PodShape, Placement]] = []
    for step in range(80):
        pod = shapes[int(rng.integers(len(shapes)))]
        if step % 7 == 3 and held:  # a change the policy does not make itself
            release(cluster, *held.pop(int(rng.integers(len(held)))))
        chosen = place(cluster, pod, fgd)
        if chosen is None:
            continue
        now = node_fragmentation(cluster, dist)
        best = np.inf
        for n in np.flatnonzero(feasible(cluster, pod)).tolist():
            options = (
                [
                    (g,)
                    for g in range(cluster.num_gpus[n])
                    if cluster.gpu_free[n, g] >= pod.gpu_milli
                ]
                if pod.gpu_milli
                else [tuple(np.flatnonzero(cluster.gpu_free[n] == 1000)[: pod.num_gpu].tolist())]
            )
            for gpus in options:
                trial = cluster.copy()
                allocate(trial, pod, Placement(n, gpus))
                best = min(best, node_fragmentation(trial, dist)[n] - now[n])
        trial = cluster.copy()
        allocate(trial, pod, chosen)
        assert node_fragmentation(trial, dist)[chosen.node] - now[chosen.node] == pytest.approx(
            best
        )
        allocate(cluster, pod, chosen)
        held.append((pod, chosen))


def test_make_policy_errors() -> None:
    with pytest.raises(ValueError):
        make_policy("fgd")
    with pytest.raises(ValueError):
        make_policy("worst_fit")
    with pytest.raises(ValueError):
        TaskDistribution((), ())


def test_allocation_ratio_arithmetic() -> None:
    cluster = GpuCluster(
        [GpuNode("a", 64_000, 1, 2, "T4"), GpuNode("b", 64_000, 1, 4, "G2"), GpuNode("c", 1, 1)]
    )
    assert cluster.total_gpu_milli == 6000
    assert gpu_allocation_ratio(cluster) == 0.0
    allocate(cluster, whole(1, mem=0), Placement(0, (1,)))
    allocate(cluster, share(250, mem=0), Placement(1, (3,)))
    allocate(cluster, whole(2, mem=0), Placement(1, (0, 1)))
    assert gpu_allocation_ratio(cluster) == pytest.approx(3250 / 6000)
    allocate(cluster, PodShape(1, 1), Placement(2, ()))  # CPU-only pods use no GPU
    assert gpu_allocation_ratio(cluster) == pytest.approx(3250 / 6000)
    assert gpu_allocation_ratio(GpuCluster([GpuNode("c", 1, 1)])) == 0.0


# -- the Alibaba trace ---------------------------------------------------------------------------


def test_trace_encoding() -> None:
    assert pod_shape(6000, 12288, 1, 460, "") == share(460, cpu=6000, mem=12288)
    assert pod_shape(8000, 1, 8, 1000, "V100M32|V100M16") == whole(
        8, cpu=8000, mem=1, models="V100M16|V100M32"
    )
    assert pod_shape(4000, 1, 0, 0, "") == PodShape(4000, 1)
    for bad in ((2, 500), (0, 300), (1, 0), (1, 1500)):
        with pytest.raises(ValueError):
            pod_shape(1000, 1, *bad, "")


def test_alibaba_trace_loads_and_packs() -> None:
    cluster = load_cluster(ALIBABA / NODE_FILE)
    pods = load_pods(ALIBABA / DEFAULT_POD_FILE)
    assert cluster.n_nodes == 1213 and cluster.total_gpu_milli == 6212 * 1000
    assert len(pods) == 8152
    assert sum(p.shape.gpu_request_milli == 0 for p in pods) == 1088
    dist = task_distribution(pods)
    assert sum(dist.counts) == 8152 - 1088
    policy = FGD(dist)
    placed = sum(schedule(cluster, p.shape, policy) is not None for p in pods[:1500])
    assert placed == 1500
    assert 0 < gpu_allocation_ratio(cluster) < 1
