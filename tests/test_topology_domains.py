"""Gangs kept together: a pod set that requires a topology domain (Kueue's
``podset-required-topology``) never spans two domains in governance, in plans, in
``fleetshare plan`` and after consolidation; one rule (``placement/topology.py``) for all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.disruption.state import place
from fleetshare.autoscaling.disruption.types import PodView
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PodShape, plan_nodes
from fleetshare.manifests.parse import Document, parse_manifests
from fleetshare.model.catalog import load_catalog
from fleetshare.model.node import HOSTNAME_LABEL, ZONE_LABEL, Node
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.first_fit import Room, first_fit_together
from fleetshare.placement.fit import NodeFit, NoFit
from fleetshare.placement.topology import NETWORK_LAYER_LABEL, domain_of
from fleetshare.scenario.planning import shapes_after_existing
from tests.conftest import run_case

CATALOG = load_catalog()
GPU = "nvidia.com/gpu"
BLOCK = NETWORK_LAYER_LABEL.format(3)
ONE_GPU = parse_resources({GPU: 1, "cpu": 4, "memory": "16Gi"})


def gpu_node(name: str, gpus: int, block: str = "b0", zone: str = "z0") -> Node:
    return Node(
        name,
        parse_resources({GPU: gpus, "cpu": 8 * gpus, "memory": f"{64 * gpus}Gi"}),
        labels={BLOCK: block, ZONE_LABEL: zone},
    )


def gang(count: int, level: str | None = HOSTNAME_LABEL, required: bool = True) -> PodSet:
    if not required:
        return PodSet("workers", count, ONE_GPU, preferred_topology=level)
    return PodSet("workers", count, ONE_GPU, required_topology=level)


def used_domains(fit: NodeFit, plan: list[list[tuple[int, int]]], level: str) -> set[object]:
    return {domain_of(fit.nodes[i].all_labels(), level) for ps in plan for i, _ in ps}


# -- governance placement --------------------------------------------------------------------


nodes_st = st.lists(
    st.tuples(st.integers(1, 8), st.integers(0, 8), st.sampled_from(["b0", "b1", "b2"])),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(nodes=nodes_st, count=st.integers(1, 12), level=st.sampled_from([HOSTNAME_LABEL, BLOCK]))
def test_a_required_domain_gang_is_placed_in_one_domain_exactly_when_one_holds_it(
    nodes: list[tuple[int, int, str]], count: int, level: str
) -> None:
    made = [gpu_node(f"n{i}", gpus, block) for i, (gpus, _, block) in enumerate(nodes)]
    fit = NodeFit(made, dict.fromkeys((n.name for n in made), "f"))
    # some GPUs already in use
    for i, (gpus, busy, _) in enumerate(nodes):
        taken = min(busy, gpus)
        if taken:
            fit.apply([PodSet("x", taken, ONE_GPU)], [[(i, taken)]], 1)
    free = {
        f"n{i}": min(gpus, 8 * gpus // 4, 64 * gpus // 16) - min(busy, gpus)
        for i, (gpus, busy, _) in enumerate(nodes)
    }
    room: dict[object, int] = {}
    for n in made:
        key = domain_of(n.all_labels(), level)
        room[key] = room.get(key, 0) + free[n.name]
    plan = fit.place(["f"], [gang(count, level)])
    if isinstance(plan, NoFit):
        assert max(room.values()) < count
        assert "required topology" in plan.message or "larger than" in plan.message
        return
    assert sum(n for _, n in plan[0]) == count
    assert len(used_domains(fit, plan, level)) == 1
    if level == BLOCK and any(free[n.name] >= count for n in made):
        assert len(plan[0]) == 1  # the tightest domain that holds it: one host


def test_the_tightest_domain_wins_and_preferred_falls_back() -> None:
    made = [gpu_node("a", 4, "b0"), gpu_node("b", 4, "b0"), gpu_node("c", 8, "b1")]
    fit = NodeFit(made, dict.fromkeys("abc", "f"))
    # 8 pods fit one host (c): chosen even though block b0 also holds them
    plan = fit.place(["f"], [gang(8, BLOCK)])
    assert not isinstance(plan, NoFit)
    assert fit.names(plan) == ((("c", 8),),)
    fit.apply([gang(8, BLOCK)], plan, 1)
    # now only block b0 (two hosts) holds 8
    plan = fit.place(["f"], [gang(8, BLOCK)])
    assert not isinstance(plan, NoFit)
    assert {name for name, _ in fit.names(plan)[0]} == {"a", "b"}
    # a host is required: no single node has 8 free
    assert isinstance(fit.place(["f"], [gang(8)]), NoFit)
    # preferred: spread when no host holds it
    plan = fit.place(["f"], [gang(8, HOSTNAME_LABEL, required=False)])
    assert not isinstance(plan, NoFit)


def test_governance_admits_a_host_gang_only_onto_one_node() -> None:
    policy = {"teams": [{"name": "ml", "quota": [{"resources": {GPU: 16}}]}]}
    nodes = [{"name": "n", "instance_type": "g6.12xlarge", "count": 2}]  # 4 GPUs each
    work = [
        {"name": "one", "team": "ml", "pods": 2, "requests": {GPU: 1}, "duration": 100},
        {"name": "two", "team": "ml", "pods": 2, "requests": {GPU: 1}, "duration": 100},
        {
            "name": "host",
            "team": "ml",
            "at": 1,
            "pods": 4,
            "requests": {GPU: 1},
            "duration": 100,
            "required_topology": HOSTNAME_LABEL,
        },
        {"name": "free", "team": "ml", "at": 1, "pods": 4, "requests": {GPU: 1}, "duration": 50},
    ]
    out = run_case(policy, nodes, work)
    wls = out["workloads"]
    # "one" and "two" share the nodes 2+2 or 4+0; the host gang waits for one whole node
    assert all(w["state"] == "finished" for w in wls.values())
    assert len(wls["host"]["placement"]["main"]) == 1
    assert list(wls["host"]["placement"]["main"].values()) == [4]


# -- the provisioner -------------------------------------------------------------------------


def gpu_offers(*families: str) -> list[Offering]:
    return [
        Offering(i.name, z, "on-demand", i.price_per_hour)
        for i in CATALOG
        if i.family in families and i.price_per_hour is not None
        for z in ("z1", "z2")
    ]


def test_an_8_gpu_gang_requiring_a_host_gets_one_8_gpu_node() -> None:
    request = tuple(sorted(parse_resources({GPU: 1, "cpu": 3, "memory": "12Gi"}).items()))
    pools = [NodePool(name="gpu", families=["g6", "g5"])]
    spread = PodShape(request, 8, gang="g")
    kept = PodShape(request, 8, gang="g", domain=HOSTNAME_LABEL)
    offers = gpu_offers("g6", "g5")
    loose = plan_nodes([spread], pools, CATALOG, offers)
    assert len(loose.nodes) > 1  # eight 1-GPU nodes are cheaper...
    plan = plan_nodes([kept], pools, CATALOG, offers)
    assert not plan.unplaceable
    [node] = plan.nodes  # ...but the gang needs one host
    assert CATALOG.get(node.instance_type).gpu_count == 8
    assert node.pods == ((0, 8),)
    # 16 pods on one host: no such instance type, so none of the gang is planned
    plan = plan_nodes(
        [PodShape(request, 16, gang="g", domain=HOSTNAME_LABEL)], pools, CATALOG, offers
    )
    assert "on one node" in plan.unplaceable[0] and not plan.nodes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gangs=st.lists(
        st.tuples(st.integers(1, 8), st.sampled_from([1, 2, 4]), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    loose=st.integers(0, 6),
)
def test_every_planned_host_gang_is_on_one_node(
    gangs: list[tuple[int, int, bool]], loose: int
) -> None:
    shapes = []
    for g, (count, cpu, zonal) in enumerate(gangs):
        req = tuple(sorted(parse_resources({GPU: 1, "cpu": cpu, "memory": "8Gi"}).items()))
        level = ZONE_LABEL if zonal and count > 1 else HOSTNAME_LABEL
        shapes.append(PodShape(req, count, gang=f"g{g}", domain=level))
    if loose:
        req = tuple(sorted(parse_resources({GPU: 1, "cpu": 2, "memory": "8Gi"}).items()))
        shapes.append(PodShape(req, loose))
    plan = plan_nodes(shapes, [NodePool(name="gpu", families=["g6"])], CATALOG, gpu_offers("g6"))
    where: dict[int, set[int]] = {}
    zones: dict[int, set[str]] = {}
    placed: dict[int, int] = {}
    for n, node in enumerate(plan.nodes):
        for s, k in node.pods:
            where.setdefault(s, set()).add(n)
            zones.setdefault(s, set()).add(node.zone)
            placed[s] = placed.get(s, 0) + k
    for s, shape in enumerate(shapes):
        if s in plan.unplaceable:
            assert s not in placed
            continue
        assert placed[s] == shape.count
        if shape.domain == HOSTNAME_LABEL:
            assert len(where[s]) == 1
        elif shape.domain == ZONE_LABEL:
            assert len(zones[s]) == 1


# -- fleetshare plan ---------------------------------------------------------------------------


def test_plan_keeps_each_workload_whole_and_its_domains() -> None:
    def wl(name: str, level: str | None) -> Workload:
        return Workload(name, "t", (PodSet("main", 4, ONE_GPU, required_topology=level),))

    single = [Workload(f"s{i}", "t", (PodSet("main", 1, ONE_GPU),)) for i in range(3)]
    shapes, fits = shapes_after_existing(
        [wl("a", HOSTNAME_LABEL), wl("b", HOSTNAME_LABEL), wl("c", None), *single], []
    )
    assert not fits
    by_workloads = {s.workloads: s for s in shapes}
    assert by_workloads[("a",)].gang == "a" and by_workloads[("a",)].count == 4
    assert by_workloads[("a",)].domain == HOSTNAME_LABEL
    assert by_workloads[("b",)].gang == "b"
    assert by_workloads[("c",)].gang == "c" and by_workloads[("c",)].domain is None
    # lone pods of different workloads may share a shape: nothing to keep together
    assert by_workloads[("s0", "s1", "s2")].count == 3


def _run_plan(tmp_path: Path, pending: str) -> subprocess.CompletedProcess[str]:
    pools = tmp_path / "pools.yaml"
    pools.write_text("pools:\n  - name: gpu\n    families: [g5, g6, m5, c5]\n")
    path = tmp_path / "pending.yaml"
    path.write_text(textwrap.dedent(pending))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetshare.cli",
            "plan",
            "--pools",
            str(pools),
            "--pending",
            str(path),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_plan_json_is_the_only_thing_on_stdout(tmp_path: Path) -> None:
    """Solver output (HiGHS prints some messages with C printf) never reaches stdout."""
    done = _run_plan(
        tmp_path,
        """
        workloads:
          - {name: train-a, team: t, pods: 8, requests: {nvidia.com/gpu: 1, cpu: 8, memory: 64Gi},
             required_topology: kubernetes.io/hostname}
          - {name: train-b, team: t, pods: 8, requests: {nvidia.com/gpu: 1, cpu: 8, memory: 64Gi},
             required_topology: kubernetes.io/hostname}
          - {name: serve, team: t, pods: 30, requests: {nvidia.com/gpu: 1, cpu: 4, memory: 16Gi}}
          - {name: web, team: t, pods: 200, requests: {cpu: 1500m, memory: 3Gi}}
          - {name: batch, team: t, pods: 150, requests: {cpu: 250m, memory: 4Gi}}
        """,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)  # nothing before or after the JSON
    assert out["launches"] and not out["unplaceable"]


def test_solver_output_written_to_fd_1_is_dropped() -> None:
    code = (
        "import os\n"
        "from fleetshare.autoscaling.provisioner.solver import quiet_stdout\n"
        "print('before', flush=True)\n"
        "with quiet_stdout():\n"
        "    os.write(1, b'HighsMipSolverData::noise\\n')\n"
        "print('after')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.stdout == "before\nafter\n"


def test_every_highs_call_of_the_provisioner_goes_through_the_quiet_wrapper() -> None:
    root = Path(__file__).resolve().parents[1] / "src" / "fleetshare"
    for path in root.rglob("*.py"):
        if path.name == "solver.py":
            continue
        assert not re.search(r"(?<![\w.])(linprog|milp)\(", path.read_text()), path


# -- consolidation -----------------------------------------------------------------------------


def _pod(name: str, gang: str | None, domain: str | None) -> PodView:
    return PodView(
        name, gang or name, "t", "old", dict(ONE_GPU), gang=gang, podset="main", domain=domain
    )


def test_evicted_host_gang_is_placed_together_or_not_at_all() -> None:
    def rooms() -> list[Room]:
        nodes = [gpu_node("a", 2), gpu_node("b", 2), gpu_node("c", 4)]
        return [Room.of(n, {**n.allocatable, "pods": 110_000}) for n in nodes]

    gang_pods = [_pod(f"g/{i}", "g", HOSTNAME_LABEL) for i in range(4)]
    placed, left = place(gang_pods, rooms())
    assert not left and set(placed.values()) == {"c"}
    placed, left = place(gang_pods, rooms()[:2])  # 2 + 2 room, no single host: none placed
    assert not placed and len(left) == 4
    loose = [_pod(f"l/{i}", "l", None) for i in range(4)]
    placed, left = place(loose, rooms()[:2])
    assert not left and set(placed.values()) == {"a", "b"}
    # the room count of the autoscaler uses the same rule
    assert first_fit_together(rooms()[:2], ONE_GPU, 4, {}, level=HOSTNAME_LABEL) == []


def test_consolidation_never_splits_a_running_host_gang() -> None:
    policy = {"teams": [{"name": "ml", "quota": [{"resources": {GPU: 16}}]}]}
    pool = {
        "name": "gpu",
        "families": ["g6"],
        "disruption": {"consolidate_after_seconds": 60},
    }
    labels = {"fleetshare.io/kind": "training", "fleetshare.io/preemptible": "true"}
    work = [
        {
            "name": "big",
            "team": "ml",
            "pods": 1,
            "duration": 600,
            "requests": {GPU: 4, "cpu": 8, "memory": "32Gi"},
        },
        {
            "name": "gang",
            "team": "ml",
            "pods": 4,
            "duration": 4 * 3600,
            "labels": labels,
            "requests": {GPU: 1, "cpu": 2, "memory": "8Gi"},
            "required_topology": HOSTNAME_LABEL,
        },
    ]
    out = run_case(policy, [], work, node_pools=[pool], cloud={"seed": 1})
    g = out["workloads"]["gang"]
    assert g["state"] == "finished"
    assert len(g["placement"]["main"]) == 1
    # once big finished, consolidation moved the gang, whole, onto big's node
    assert [p["reason"] for p in g["preemptions"]] == ["consolidation"]
    assert any("consolidation" in (n["termination_reason"] or "") for n in out["nodes"])


# -- manifests ---------------------------------------------------------------------------------


def test_kueue_topology_annotations_become_the_pod_sets_topology() -> None:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": BLOCK}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            },
        },
    }
    [wl] = parse_manifests([Document("job", job)])
    assert wl.podsets[0].required_topology == BLOCK
    assert wl.podsets[0].preferred_topology is None
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    annotations.clear()
    annotations["kueue.x-k8s.io/podset-preferred-topology"] = HOSTNAME_LABEL
    [wl] = parse_manifests([Document("job", job)])
    assert wl.podsets[0].preferred_topology == HOSTNAME_LABEL
    assert not any("preferred-topology" in note for note in wl.notes)
