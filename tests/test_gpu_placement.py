"""GPU shares and MIG slices in governance placement, and the placement policies.

A share of a GPU (``nvidia.com/gpu`` below 1000m per pod) must sit inside one physical GPU;
whole GPUs must be fully free; MIG slices come from the node's layout and are taken whole.
The invariant is checked from what the engine hands a backend (``Assignment.gpus``), not from
its internal state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.model.catalog import load_catalog, mig_allocatable
from fleetshare.model.node import Node
from fleetshare.model.placement import PLACEMENTS
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.fit import NodeFit, NoFit, PlacementPlan
from fleetshare.placement.gpu_slots import counted_requests
from fleetshare.policy.errors import PolicyError
from fleetshare.policy.schema import load_policy

GPU = "nvidia.com/gpu"
GI = 2**30 * 1000


def node(name: str, gpus: int, cpu: int = 64, **extra: int) -> Node:
    alloc = {"cpu": cpu * 1000, "memory": 256 * GI, **extra}
    if gpus:
        alloc[GPU] = gpus * 1000
    return Node(name, alloc)


def pods(milli: int, count: int = 1, name: str = "p") -> PodSet:
    requests = {"cpu": 1000, "memory": GI}
    if milli:
        requests[GPU] = milli
    return PodSet(name, count, requests)


def fit_of(nodes: Sequence[Node], placement: str = "default") -> NodeFit:
    return NodeFit(nodes, {n.name: "f" for n in nodes}, placement=placement)


def place(fit: NodeFit, podset: PodSet) -> PlacementPlan:
    """Place and take one pod set (fails the test when it does not fit)."""
    plan = fit.place(["f"], [podset])
    assert not isinstance(plan, NoFit), plan
    fit.apply([podset], plan, 1)
    return plan


# -- a share never straddles GPUs ---------------------------------------------------------------


def test_two_shares_of_six_tenths_take_two_gpus_and_a_third_does_not_fit() -> None:
    fit = fit_of([node("n", 2)])
    plan = fit.place(["f"], [pods(600, 2)])
    assert not isinstance(plan, NoFit)
    assert plan == [[(0, 2)]] and plan.gpus == [((0, 1),)]
    # 1.8 GPUs of 2 are free in total, but no single GPU holds a third 0.6 share
    three = fit.place(["f"], [pods(600, 3)])
    assert isinstance(three, NoFit)
    assert "room for 2 of 3 pods" in three.message


@settings(max_examples=80, deadline=None)
@given(share=st.integers(100, 999), gpus=st.integers(1, 8))
def test_node_totals_count_identical_shares_as_placement_fits_them(share: int, gpus: int) -> None:
    # the autoscaler packs by node totals (counted_requests); governance places per GPU:
    # for identical shares of 0.1 GPU or more on up to 8 GPUs both find room for as many pods
    by_totals = gpus * 1000 // counted_requests({GPU: share})[GPU]
    fit = fit_of([node("n", gpus, cpu=4096, memory=4096 * GI, pods=1 << 20)])
    assert not isinstance(fit.place(["f"], [pods(share, by_totals)]), NoFit)
    assert isinstance(fit.place(["f"], [pods(share, by_totals + 1)]), NoFit)


def test_whole_gpus_need_fully_free_gpus_beside_shares() -> None:
    fit = fit_of([node("n", 2)])
    share = pods(300)
    fit.apply([share], PlacementPlan([[(0, 1)]], [((0,),)]), 1)
    fit.apply([share], PlacementPlan([[(0, 1)]], [((1,),)]), 1)  # recorded on GPU 1
    # 1.4 GPUs free in total, none of them whole
    assert isinstance(fit.place(["f"], [pods(1000)]), NoFit)
    assert not isinstance(fit.place(["f"], [pods(700)]), NoFit)


def test_releasing_returns_the_gpu_the_share_took() -> None:
    fit = fit_of([node("n", 2)])
    first = place(fit, pods(500))
    place(fit, pods(600))  # the first GPU has 500 left: the second share opens GPU 1
    assert fit.shares is not None
    assert fit.shares.used[0].tolist() == [500, 600]
    fit.apply([pods(500)], first, -1)
    assert fit.shares.used[0].tolist() == [0, 600]
    assert not isinstance(fit.place(["f"], [pods(1000)]), NoFit)  # GPU 0 whole again


def test_a_share_given_back_and_restored_returns_to_its_gpu_beside_a_whole_gpu() -> None:
    """A preemption search removes and restores victims: the share must come back to the GPU
    the backend was told, even though a whole GPU was taken meanwhile."""
    fit = fit_of([node("n", 2)])
    share = pods(100)
    plan = PlacementPlan([[(0, 1)]], [((1,),)])
    fit.apply([share], plan, 1)
    place(fit, pods(1000))
    fit.apply([share], plan, -1)
    fit.apply([share], plan, 1)
    assert plan.gpus == [((1,),)]
    assert fit.shares is not None and fit.shares.used[0].tolist() == [0, 100]


def test_a_gpu_request_of_whole_and_part_is_refused_with_a_reason() -> None:
    fit = fit_of([node("n", 4)])
    result = fit.place(["f"], [pods(1500)])
    assert isinstance(result, NoFit)
    assert "neither whole GPUs nor a share of one GPU" in result.message


def test_mig_slices_come_from_the_layout_and_are_taken_whole() -> None:
    p4d = load_catalog().get("p4d.24xlarge")
    alloc = mig_allocatable(p4d, [([0], {"1g.5gb": 7})])  # GPU 0 cut in 7 slices, 7 whole
    fit = fit_of([Node("p4d", alloc)])
    slice_pod = PodSet("s", 1, {"cpu": 100, "nvidia.com/mig-1g.5gb": 1000})
    for _ in range(7):
        place(fit, slice_pod)
    assert isinstance(fit.place(["f"], [slice_pod]), NoFit)
    half = PodSet("h", 1, {"cpu": 100, "nvidia.com/mig-1g.5gb": 500})
    refused = fit.place(["f"], [half])
    assert isinstance(refused, NoFit) and "MIG slices are taken whole" in refused.message
    # shares go on the 7 GPUs left whole only: 14 halves, not 16
    halves = fit.place(["f"], [pods(500, 14)])
    assert not isinstance(halves, NoFit)
    assert isinstance(fit.place(["f"], [pods(500, 15)]), NoFit)


# -- policies choose differently, each as documented --------------------------------------------


def _three_nodes(placement: str) -> NodeFit:
    """n0: 2 empty GPUs; n1: 2 GPUs, GPU 0 holding a 0.6 share; n2: 1 empty GPU."""
    fit = fit_of([node("n0", 2), node("n1", 2), node("n2", 1)], placement)
    fit.apply([pods(600)], PlacementPlan([[(1, 1)]], [((0,),)]), 1)
    return fit


@pytest.mark.parametrize(
    ("placement", "where"),
    [
        # the first node where the pod fits, its first GPU that fits
        ("first_fit", ("n0", 0)),
        # least free GPU left on the node (n2: 1 GPU), the fullest GPU that fits
        ("best_fit", ("n2", 0)),
        # against a target of 0.6 shares, filling n1's GPU 0 (0.4 free, unusable by a
        # 0.6 share) removes 400m of fragmentation; every other choice changes nothing
        ("fgd", ("n1", 0)),
        # the node where fewest pods of the set fit: n2 holds 2 shares of 0.4, n1 3, n0 4
        ("default", ("n2", 0)),
    ],
)
def test_each_policy_places_a_share_where_documented(
    placement: str, where: tuple[str, int]
) -> None:
    fit = _three_nodes(placement)
    fit.set_target([pods(600, 5)])
    plan = fit.place(["f"], [pods(400)])
    assert not isinstance(plan, NoFit)
    (i, n), gpus = plan[0][0], plan.gpus[0][0]
    assert (fit.nodes[i].name, gpus[0]) == where and n == 1


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_ties_go_to_node_order_not_names(placement: str) -> None:
    fit = fit_of([node("zeta", 2), node("alpha", 2)], placement)
    fit.set_target([pods(500)])
    for milli in (500, 1000, 0):
        plan = fit.place(["f"], [pods(milli)])
        assert not isinstance(plan, NoFit)
        assert fit.names(plan) == ((("zeta", 1),),)


def test_policy_is_chosen_in_the_cluster_policy_and_checked() -> None:
    teams = [{"name": "t", "quota": [{"resources": {"cpu": 100}}]}]
    fit = load_policy({"teams": teams, "cluster": {"placement": "best_fit"}})
    assert fit.cluster.placement == "best_fit"
    assert load_policy({"teams": teams}).cluster.placement == "default"
    with pytest.raises(PolicyError, match=r"cluster\.placement"):
        load_policy({"teams": teams, "cluster": {"placement": "tightest"}})


def test_fgd_in_the_engine_targets_the_running_and_pending_pods() -> None:
    nodes = [node("n0", 2), node("n1", 2), node("n2", 1)]
    policy = load_policy(
        {
            "teams": [{"name": "t", "quota": [{"resources": {GPU: 5}}]}],
            "cluster": {"placement": "fgd"},
        }
    )
    running = Workload("r", "t", (pods(600),))
    run = Running(
        running,
        _assignment((("n1", 1),), ((0,),)),
        0.0,
    )
    wanted = [Workload(f"w{k}", "t", (pods(600 if k else 400),), submit_time=k) for k in range(3)]
    result = Engine(policy).cycle(Snapshot(1.0, nodes, [run], wanted))
    first = result.admissions[0]
    assert first.workload.name == "w0"
    assert first.assignment.placement == ((("n1", 1),),) and first.assignment.gpus == (((0,),),)


def _assignment(pairs: tuple[tuple[str, int], ...], gpus: tuple[tuple[int, ...], ...]) -> object:
    from fleetshare.governance.snapshot import Assignment

    return Assignment(("default",), (pairs,), (gpus,))


# -- property: after admissions, preemptions and releases --------------------------------------


def _check_gpus(nodes: Sequence[Node], running: Sequence[Running]) -> None:
    """Per node: shares on each GPU add up to at most 1000m; GPUs hosting shares plus GPUs
    taken whole are at most the node's GPUs."""
    gpus = {n.name: n.allocatable.get(GPU, 0) // 1000 for n in nodes}
    share_on: dict[tuple[str, int], int] = defaultdict(int)
    whole: dict[str, int] = defaultdict(int)
    for run in running:
        for k, (podset, pairs) in enumerate(
            zip(run.workload.podsets, run.assignment.placement, strict=True)
        ):
            milli = podset.requests.get(GPU, 0)
            for j, (name, count) in enumerate(pairs):
                if milli >= 1000:
                    whole[name] += count * (milli // 1000)
                elif milli:
                    on = run.assignment.gpus[k][j]
                    assert len(on) == count
                    for g in on:
                        assert 0 <= g < gpus[name]
                        share_on[(name, g)] += milli
    for (name, g), used in share_on.items():
        assert used <= 1000, f"GPU {g} of {name} holds {used}m of shares"
    for name, count in gpus.items():
        hosting = sum(1 for (n, _) in share_on if n == name)
        assert hosting + whole[name] <= count, name


_POD = st.sampled_from([0, 100, 250, 300, 500, 600, 750, 1000, 2000])


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[Node], list[Workload], list[int], str]:
    nodes = [node(f"n{k}", draw(st.integers(1, 4)), cpu=16) for k in range(draw(st.integers(1, 3)))]
    workloads = []
    for k in range(draw(st.integers(1, 14))):
        sets = tuple(
            pods(draw(_POD), draw(st.integers(1, 3)), f"s{j}")
            for j in range(draw(st.integers(1, 2)))
        )
        team = draw(st.sampled_from(["a", "b"]))
        workloads.append(Workload(f"w{k}", team, sets, float(k), priority=draw(st.integers(0, 2))))
    finish = draw(st.lists(st.integers(0, 13), max_size=6))
    return nodes, workloads, finish, draw(st.sampled_from(PLACEMENTS))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_a_share_never_straddles_two_gpus(
    case: tuple[list[Node], list[Workload], list[int], str],
) -> None:
    nodes, workloads, finish, placement = case
    gpus = sum(n.allocatable[GPU] // 1000 for n in nodes)
    policy = load_policy(
        {
            "teams": [
                {"name": "a", "quota": [{"resources": {GPU: 1}}]},
                {"name": "b", "quota": [{"resources": {GPU: max(0, gpus - 1)}}]},
            ],
            "cluster": {"placement": placement},
        }
    )
    engine, cache = Engine(policy), CycleCache()
    running: dict[str, Running] = {}
    pending = {w.name: w for w in workloads[:4]}
    later = list(workloads[4:])
    for turn in range(8):
        now = float(turn + 1)
        result = engine.cycle(
            Snapshot(now, nodes, list(running.values()), list(pending.values())), cache
        )
        for p in result.preemptions:
            del running[p.workload.name]
            pending[p.workload.name] = p.workload
        for a in result.admissions:
            running[a.workload.name] = Running(a.workload, a.assignment, now)
            del pending[a.workload.name]
        _check_gpus(nodes, list(running.values()))
        for k in finish[turn::8]:  # releases
            running.pop(f"w{k}", None)
        pending.update((w.name, w) for w in later[:2])
        later = later[2:]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1000, 2000, 3000]), st.integers(1, 4)), max_size=12))
def test_without_shares_the_per_gpu_state_changes_no_choice(
    stream: list[tuple[int, int]],
) -> None:
    nodes = [node("n0", 4), node("n1", 8), node("n2", 2)]
    plain = fit_of(nodes)
    tracked = fit_of(nodes)
    share = pods(500)
    taken = tracked.place(["f"], [share])
    assert not isinstance(taken, NoFit)
    tracked.apply([share], taken, 1)
    tracked.apply([share], taken, -1)  # per-GPU state exists now, with nothing on it
    assert tracked.shares is not None and plain.shares is None
    for milli, count in stream:
        podset = pods(milli, count)
        a, b = plain.place(["f"], [podset]), tracked.place(["f"], [podset])
        assert a == b
        if not isinstance(a, NoFit):
            plain.apply([podset], a, 1)
            tracked.apply([podset], b, 1)  # type: ignore[arg-type]
    assert (plain.free == tracked.free).all()


# -- simulations ------------------------------------------------------------------------------


def test_simulate_runs_each_variant_once_per_placement() -> None:
    from fleetshare.simulate.variants import select

    chosen = select(["static", "fair-share"], ["fgd", "best_fit"])
    assert [v.name for v in chosen] == [
        "static+fgd",
        "static+best_fit",
        "fair-share+fgd",
        "fair-share+best_fit",
    ]
    data = chosen[0].policy({"teams": []}, load_catalog())
    assert data["cluster"]["placement"] == "fgd"
    assert "placement" not in select(["static"])[0].policy({"teams": []}, load_catalog())["cluster"]
    with pytest.raises(ValueError, match="--placement: unknown 'tightest'"):
        select(["static"], ["tightest"])


def test_alibaba_load_options_scale_arrivals_and_sample_nodes() -> None:
    from fleetshare.traces import load_trace

    plain = load_trace("alibaba", pods="gpushare100")
    loaded = load_trace("alibaba", pods="gpushare100", arrival_scale=10, node_sample=4)
    assert [n.name for n in loaded.nodes] == [n.name for n in plain.nodes][::4]
    times = {w.name: w.submit_time for w in plain.workloads}
    assert all(w.submit_time == pytest.approx(times[w.name] / 10) for w in loaded.workloads)
    assert plain.duration >= max(w.submit_time + (w.duration or 0) for w in plain.workloads)
