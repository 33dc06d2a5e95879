"""Kueue fields that change the outcome (issue 27): stopPolicy, namespaceSelector, partial
admission, resource transformations, Cohort fair-sharing weights.

Written from Kueue's API and documentation (each test names what it follows); the scenarios
``tests/scenarios/kueue-stop-policy.yaml`` and the others named in each section show each on a
small cluster. These tests pin the importer's mapping and the finer points.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetshare.governance.partial import counts_after, largest_fit, reducible
from fleetshare.governance.quota import Charging, compile_policy
from fleetshare.governance.snapshot import Assignment, Running, Snapshot
from fleetshare.governance.state import CycleState
from fleetshare.manifests import parse_manifest
from fleetshare.manifests.kinds.base import POD_GROUP_LABEL, QUEUE_LABEL
from fleetshare.manifests.kinds.job import MIN_PARALLELISM
from fleetshare.manifests.kueue_keys import KEYS, key_rule
from fleetshare.manifests.parse import GROUP_ANNOTATIONS, PRIORITY_LABEL
from fleetshare.manifests.pods import TOPOLOGY_ANNOTATIONS
from fleetshare.model.node import Node
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.import_report import ImportReport
from fleetshare.policy.kueue import NO_NAMESPACE, import_kueue
from fleetshare.policy.kueue_fields import CONFIGURATION, KINDS, OBJECTS
from fleetshare.policy.schema import LabelSelector, PolicyError, StopPolicy, load_policy
from tests.conftest import run_case

FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
"""


def queue(name: str, spec: str = "", cohort: str = "all") -> str:
    return f"""
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{}}
  cohort: {cohort}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default-flavor, resources: [{{name: cpu, nominalQuota: 4}}]}}]
{spec}"""


def local_queue(namespace: str, name: str, target: str, spec: str = "") -> str:
    return f"""
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{namespace: {namespace}, name: {name}}}
spec: {{clusterQueue: {target}{spec}}}
"""


def problems(text: str) -> dict[str, str]:
    with pytest.raises(PolicyError) as excinfo:
        import_kueue(text)
    return dict(excinfo.value.problems)


NODE = [{"name": "n", "allocatable": {"cpu": 16, "memory": "64Gi"}}]


def job(name: str, team: str, at: float = 0, cpu: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "team": team, "at": at, "duration": 100, "requests": {"cpu": cpu}} | extra


# --- stopPolicy --------------------------------------------------------------------------------


def test_stop_policies_are_mapped() -> None:
    policy = import_kueue(
        FLAVOR
        + queue("a", "  stopPolicy: HoldAndDrain")
        + queue("b", "  stopPolicy: None")
        + local_queue("ns", "q", "b", ", stopPolicy: Hold")
        + local_queue("ns", "r", "b", ", stopPolicy: None")
    )
    assert policy.team("a").stop_policy is StopPolicy.HOLD_AND_DRAIN
    assert policy.team("b").stop_policy is StopPolicy.NONE
    assert policy.team("b").local_queue_stop_policies == {"ns/q": StopPolicy.HOLD}
    assert not any("stopPolicy" in n for n in policy.notes)


def test_an_unknown_stop_policy_is_rejected() -> None:
    found = problems(FLAVOR + queue("a", "  stopPolicy: Pause"))
    assert "Hold, HoldAndDrain" in found["ClusterQueue/a.spec.stopPolicy"]
    found = problems(FLAVOR + queue("a") + local_queue("ns", "q", "a", ", stopPolicy: Stop"))
    assert "HoldAndDrain" in found["LocalQueue/ns/q.spec.stopPolicy"]


def test_a_stopped_local_queue_does_not_block_a_strict_fifo_queue() -> None:
    """Kueue keeps the work of a stopped LocalQueue out of its ClusterQueue's queue: under
    StrictFIFO the older job of the stopped queue blocks nothing."""
    policy = {
        "teams": [
            {
                "name": "a",
                "quota": [{"resources": {"cpu": 4}}],
                "queueing_strategy": "StrictFIFO",
                "local_queues": ["ns/stopped", "ns/open"],
                "local_queue_stop_policies": {"ns/stopped": "Hold"},
            }
        ]
    }
    out = run_case(
        policy, NODE, [job("old", "ns/stopped", at=0), job("new", "ns/open", at=1)], until=50
    )
    assert out["workloads"]["old"]["state"] == "pending"
    assert "local queue ns/stopped is inactive" in out["workloads"]["old"]["pending_reason"]
    assert out["workloads"]["new"]["admitted_at"] == 1.0


def test_hold_keeps_the_quota_lendable_and_hold_and_drain_frees_it_at_once() -> None:
    """A stopped team's quota stays in its cohort (Kueue keeps the ClusterQueue's quota in
    the cohort tree); what HoldAndDrain evicts is free for others in the same cycle."""
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "groups": [{"name": "all"}],
        "teams": [
            {"name": "a", "group": "all", "quota": [{"resources": {"cpu": 4}}]},
            {"name": "b", "group": "all", "quota": [{"resources": {"cpu": 4}}]},
        ],
    }
    stopped = {**policy, "teams": [{**policy["teams"][0], "stop_policy": "HoldAndDrain"},
                                   policy["teams"][1]]}  # fmt: skip
    out = run_case(
        policy,
        NODE,
        [job("a1", "a", cpu=4), job("b-big", "b", at=1, cpu=8)],
        policy_changes=[{"at": 5, "policy": stopped}],
        until=50,
    )
    wl = out["workloads"]
    assert wl["a1"]["preemptions"] == [{"at": 5, "by": "a", "reason": "stopped"}]
    assert wl["a1"]["state"] == "preempted"  # and waiting again
    assert wl["b-big"]["admitted_at"] == 5.0
    assert wl["b-big"]["borrowed"] == {"cpu": 4}


# --- namespaceSelector -------------------------------------------------------------------------


def cq_with_selector(selector: str | None) -> str:
    spec = "" if selector is None else f"  namespaceSelector: {selector}\n"
    return (
        FLAVOR
        + f"""
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: a}}
spec:
{spec}  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default-flavor, resources: [{{name: cpu, nominalQuota: 4}}]}}]
"""
    )


def test_namespace_selectors_are_mapped() -> None:
    """``{}`` admits every namespace (no selector); absent, Kueue's "nothing selector (no
    namespaces eligible)", said in a note; matchLabels and matchExpressions carried over."""
    assert import_kueue(cq_with_selector("{}")).team("a").namespace_selector is None
    absent = import_kueue(cq_with_selector(None))
    assert absent.team("a").namespace_selector == NO_NAMESPACE
    assert any("no namespaceSelector: in Kueue that admits no namespace" in n for n in absent.notes)
    given = import_kueue(
        cq_with_selector(
            "{matchLabels: {team: a}, matchExpressions: [{key: tier, operator: NotIn, "
            "values: [dev, test]}, {key: owner, operator: Exists}]}"
        )
    )
    selector = given.team("a").namespace_selector
    assert selector is not None
    assert selector.match_labels == {"team": "a"}
    assert [(r.key, r.operator, r.values) for r in selector.match_expressions] == [
        ("tier", "NotIn", ["dev", "test"]),
        ("owner", "Exists", []),
    ]
    assert not any("namespaceSelector" in n for n in given.notes)


@pytest.mark.parametrize(
    ("selector", "path", "says"),
    [
        ("{matchExpressions: [{key: t, operator: Matches, values: [x]}]}", "[0].operator", "In"),
        ("{matchExpressions: [{key: t, operator: In}]}", "[0].values", "at least one value"),
        ("{matchExpressions: [{key: t, operator: Exists, values: [x]}]}", "[0].values", "no value"),
        ("{matchExpressions: [{operator: Exists}]}", "[0].key", "required"),
        ("{matchLabels: {team: 1}}", "", "strings"),
    ],
)
def test_bad_namespace_selectors_are_rejected(selector: str, path: str, says: str) -> None:
    found = problems(cq_with_selector(selector))
    where = next(k for k in found if k.startswith("ClusterQueue/a.spec.namespaceSelector"))
    assert where.endswith(path) or not path
    assert says in found[where]


def workload(queue: str | None) -> Workload:
    return Workload("w", "a", (PodSet("main", 1, {"cpu": 1000}),), queue=queue)


def test_a_namespace_is_matched_by_its_labels_and_its_name() -> None:
    """Every namespace carries kubernetes.io/metadata.name; one not declared carries only
    that. Work that names its team, not a local queue, has no namespace: never refused."""
    policy = import_kueue(
        cq_with_selector("{matchExpressions: [{key: tier, operator: NotIn, values: [dev]}]}")
        + local_queue("x", "q", "a")
        + local_queue("y", "q", "a")
    )
    rules = compile_policy(policy, None).teams["a"]
    labels = {"x": {"tier": "dev"}}
    assert rules.refusal(workload("x/q"), labels) is not None
    assert rules.refusal(workload("y/q"), labels) is None  # not declared: no tier
    assert rules.refusal(workload(None), labels) is None
    by_name = LabelSelector(match_labels={"kubernetes.io/metadata.name": "y"})
    named = compile_policy(
        policy.model_copy(
            update={"teams": [policy.teams[0].model_copy(update={"namespace_selector": by_name})]}
        ),
        None,
    ).teams["a"]
    assert named.refusal(workload("y/q"), {}) is None
    assert named.refusal(workload("x/q"), {}) is not None


def test_a_stopped_teams_work_is_not_reclaimed() -> None:
    """An inactive ClusterQueue is left out of Kueue's scheduling snapshot, so its admitted
    workloads are no preemption candidates: what a Hold team borrowed is kept until it ends."""
    team = {"quota": [{"resources": {"cpu": 4}}], "group": "all", "reclaim": "Any"}
    policy = {
        "cluster": {"idle_resource_sharing": False},
        "groups": [{"name": "all"}],
        "teams": [{"name": "a", **team}, {"name": "b", **team}],
    }
    held = {
        **policy,
        "teams": [{"name": "a", **team, "stop_policy": "Hold"}, {"name": "b", **team}],
    }
    jobs = [job("a-borrows", "a", cpu=8), job("b-own", "b", at=20, cpu=4)]
    plain = run_case(policy, NODE, jobs, until=50)["workloads"]
    assert plain["b-own"]["admitted_at"] == 20.0  # reclaimed from a
    stopped = run_case(policy, NODE, jobs, policy_changes=[{"at": 10, "policy": held}], until=50)
    assert stopped["workloads"]["a-borrows"]["preemptions"] == []
    assert stopped["workloads"]["b-own"]["state"] == "pending"


# --- resource transformations ------------------------------------------------------------------

CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
resources:
"""


def test_resource_transformations_are_mapped() -> None:
    policy = import_kueue(
        CONFIG
        + """  excludeResourcePrefixes: [ephemeral-storage, example.com/ignored]
  transformations:
  - input: nvidia.com/mig-1g.5gb
    strategy: Replace
    outputs: {example.com/accelerator-memory: 5Gi, example.com/credits: 2}
  - input: cpu
    multiplyBy: example.com/cores
    outputs: {example.com/credits: 500m}
---"""
        + FLAVOR
        + queue("a")
    )
    first, second = policy.cluster.resource_transformations
    assert (first.input, first.strategy, first.outputs) == (
        "nvidia.com/mig-1g.5gb",
        "Replace",
        {"example.com/accelerator-memory": "5Gi", "example.com/credits": 2},
    )
    assert (second.strategy, second.multiply_by) == ("Retain", "example.com/cores")
    assert policy.cluster.excluded_resource_prefixes == ["ephemeral-storage", "example.com/ignored"]
    assert not any(".resources" in n for n in policy.notes)


T = "  transformations: "


@pytest.mark.parametrize(
    ("resources", "path", "says"),
    [
        (T + "[{strategy: Replace}]", "transformations[0].input", "required"),
        (T + "[{input: cpu, strategy: Swap}]", "transformations[0].strategy", "Retain"),
        (T + "[{input: cpu, outputs: {x: lots}}]", "transformations[0].outputs.x", "quantity"),
        (T + "[{input: cpu}, {input: cpu}]", "transformations[1].input", "twice"),
        ("  excludeResourcePrefixes: ['']", "excludeResourcePrefixes[0]", "prefix"),
    ],
)
def test_bad_resource_transformations_are_rejected(resources: str, path: str, says: str) -> None:
    found = problems(CONFIG + resources + "\n---" + FLAVOR + queue("a"))
    assert says in found[f"Configuration.resources.{path}"]


def charging(**cluster: Any) -> Charging:
    policy = {"cluster": cluster, "teams": [{"name": "a", "quota": [{"resources": {"cpu": 1}}]}]}
    return compile_policy(load_policy(policy), None).teams["a"].charging


def test_a_transformation_counts_whole_units_of_its_input() -> None:
    """Kueue multiplies each output by the input's Quantity.Value(), its whole units rounded
    up: 500m cpu is one unit; with multiplyBy, times the whole units of that resource too.
    Retain keeps the input, Replace drops it; outputs of several inputs add up."""
    count = charging(
        resource_transformations=[
            {"input": "cpu", "outputs": {"credits": 1}},
            {"input": "gpu", "strategy": "Replace", "outputs": {"credits": 10, "mem": "1Gi"}},
            {
                "input": "slices",
                "strategy": "Replace",
                "multiply_by": "size",
                "outputs": {"mem": 2},
            },
        ],
        excluded_resource_prefixes=["ephemeral"],
    )
    requests = {"cpu": 500, "gpu": 2000, "ephemeral-storage": 10**12, "slices": 3000, "size": 1500}
    assert count.requests(requests) == {
        "cpu": 500,
        "credits": 1000 + 2 * 10_000,
        "mem": 2 * 2**30 * 1000 + 3 * 2 * 2000,
        "size": 1500,
    }


def test_covered_resources_are_those_of_the_transformed_requests() -> None:
    """A ClusterQueue covers what Kueue counts: a replaced input need not be covered."""
    policy = {
        "cluster": {
            "resource_transformations": [
                {"input": "example.com/slice", "strategy": "Replace", "outputs": {"mem": 5}}
            ]
        },
        "teams": [
            {"name": "a", "quota": [{"resources": {"mem": 10}}], "covered_resources": ["mem"]}
        ],
    }
    nodes = [{"name": "n", "allocatable": {"cpu": 4, "example.com/slice": 4}}]
    jobs = [
        {"name": "fits", "team": "a", "requests": {"example.com/slice": 2}},
        {"name": "over", "team": "a", "at": 1, "requests": {"example.com/slice": 1}},
    ]
    out = run_case(policy, nodes, jobs, until=10)["workloads"]
    assert out["fits"]["state"] == "admitted"
    assert "mem" in out["over"]["pending_reason"]  # 10 + 5 > 10


# --- partial admission -------------------------------------------------------------------------


def test_the_reducer_takes_pods_off_the_last_pod_set_first() -> None:
    wl = Workload(
        "w",
        "a",
        (
            PodSet("a", 4, {"cpu": 1000}, min_count=2),
            PodSet("b", 3, {"cpu": 1000}),
            PodSet("c", 5, {"cpu": 1000}, min_count=1),
        ),
    )
    deltas = reducible(wl)
    assert deltas == (2, 0, 4)
    assert counts_after(wl, deltas, 3) == (4, 3, 2)
    assert counts_after(wl, deltas, 5) == (3, 3, 1)
    assert counts_after(wl, deltas, 6) == (2, 3, 1)
    fits = lambda counts: sum(counts) <= 8  # noqa: E731
    assert largest_fit(wl, fits) == (4, 3, 1)
    assert largest_fit(wl, lambda counts: sum(counts) <= 7) == (3, 3, 1)
    assert largest_fit(wl, lambda counts: False) is None


def partial_case(**extra: Any) -> dict[str, Any]:
    policy = {
        "cluster": {
            "priority_classes": [{"name": "low", "weight": 1}, {"name": "high", "weight": 9}]
        },
        "teams": [
            {
                "name": "a",
                "quota": [{"resources": {"cpu": 8}}],
                "sharing": "DontLend",
                "preempt_team_tasks": "LowerPriority",
            }
        ],
    }
    return policy | extra


def test_preemption_comes_before_fewer_pods() -> None:
    """Kueue "will only attempt to decrease the parallelism after both borrowing and
    preemption was taken into account": the whole job preempts lower-priority work first."""
    jobs = [
        job("low", "a", cpu=4, priority="low"),
        job("wide", "a", at=10, priority="high", pods=8, min_pods=2),
    ]
    out = run_case(partial_case(), NODE, jobs, until=50)["workloads"]
    assert out["wide"]["admitted_pods"] == {"main": 8}
    assert out["low"]["preemptions"] == [{"at": 10, "by": "wide", "reason": "priority"}]


def test_a_partially_admitted_workload_is_requeued_whole() -> None:
    """Evicted, a Job gets its parallelism back (Kueue restores it): it is considered again
    with every pod, and admitted with as many as then fit (here 2, beside its preemptor)."""
    jobs = [
        job("holder", "a", cpu=5, priority="low"),
        job("part", "a", at=1, priority="low", pods=6, min_pods=2),
        job("boss", "a", at=20, priority="high", cpu=6),
    ]
    out = run_case(partial_case(), NODE, jobs, until=300)
    part = out["workloads"]["part"]
    assert [p["by"] for p in part["preemptions"]] == ["boss"]
    admits = [e["pods"] for e in out["events"] if e["event"] == "admit" and e["workload"] == "part"]
    assert admits == [{"main": 3}, {"main": 2}]
    assert part["admitted_pods"] == {"main": 2}


def test_partial_admission_from_a_job_annotation() -> None:
    from fleetshare.manifests import ManifestError, parse_manifests
    from fleetshare.manifests.parse import Document

    def job_doc(least: str, kind: str = "Job", api: str = "batch/v1") -> dict[str, Any]:
        return {
            "apiVersion": api,
            "kind": kind,
            "metadata": {
                "name": "j",
                "labels": {"fleetshare.io/team": "a"},
                "annotations": {"kueue.x-k8s.io/job-min-parallelism": least},
            },
            "spec": {
                "parallelism": 4,
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": 1}}}]}
                },
            },
        }

    (mw,) = parse_manifests([Document("d", job_doc("2"))])
    assert mw.podsets[0].min_count == 2
    assert not any("min-parallelism" in n for n in mw.notes)
    for bad in ("0", "4", "two"):
        with pytest.raises(ManifestError, match="job-min-parallelism"):
            parse_manifests([Document("d", job_doc(bad))])


# --- cohort fair sharing ----------------------------------------------------------------------


def cohort_state(text: str, running: list[tuple[str, dict[str, Any]]]) -> CycleState:
    policy = import_kueue(text)
    model = compile_policy(policy, None)
    nodes = [Node("n", {"cpu": 64_000, "memory": 256 * 2**30 * 1000})]
    flavor = "default-flavor"
    loaded = [
        Running(
            Workload(f"w{i}", team, (PodSet("main", 1, parse_resources(requests)),)),
            Assignment((flavor,), ((("n", 1),),)),
            0.0,
        )
        for i, (team, requests) in enumerate(running)
    ]
    return CycleState(model, policy.cluster, Snapshot(0.0, nodes, loaded, []))


def fair_queue(name: str, cohort: str, cpu: int = 0, memory: str = "0") -> str:
    return f"""
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{}}
  cohort: {cohort}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources: [{{name: cpu, nominalQuota: {cpu}}}, {{name: memory, nominalQuota: "{memory}"}}]
"""


def test_a_dominant_share_is_per_resource_over_what_the_cohort_could_lend() -> None:
    """Kueue's dominant resource share: per resource, borrowed over what the parent cohort
    could lend (10 cpu, 100Gi here), the largest ratio, divided by the weight; cpu and
    memory compare as fractions, not as amounts (a byte is no more than a core)."""
    text = (
        FLAVOR
        + fair_queue("lender", "all", cpu=10, memory="100Gi")
        + fair_queue("cores", "all")
        + fair_queue("bytes", "all")
    )
    state = cohort_state(
        text, [("cores", {"cpu": 4, "memory": "1Gi"}), ("bytes", {"cpu": 1, "memory": "10Gi"})]
    )
    assert state.dominant_share("cores") == pytest.approx(0.4)
    assert state.dominant_share("bytes") == pytest.approx(0.1)


def test_a_cohort_weight_divides_its_share_and_orders_its_teams_work() -> None:
    """A nested cohort's share is its usage beyond its subtree quota over what its parent
    could lend, divided by its fairSharing.weight; the key ordering a team's work starts with
    the shares of the cohorts above it that may borrow (the root cohort, which lends to no
    one and borrows from no one, always 0, is left out)."""
    cohorts = """
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: root}
spec:
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 8}, {name: memory, nominalQuota: 32Gi}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: heavy}
spec: {parent: root, fairSharing: {weight: "0.75"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Cohort
metadata: {name: light}
spec: {parent: root, fairSharing: {weight: "0.25"}}
"""
    text = FLAVOR + cohorts + fair_queue("h", "heavy") + fair_queue("l", "light")
    state = cohort_state(text, [("h", {"cpu": 3}), ("l", {"cpu": 1})])
    assert state.share("heavy") == pytest.approx(3 / 8 / 0.75)
    assert state.share("light") == pytest.approx(1 / 8 / 0.25)
    assert state.model.fair_paths["h"] == ("heavy", "h")
    one = {("default-flavor", "cpu"): 1000}
    assert state.fair_key("h", one) == pytest.approx((0.5, 4 / 8))
    assert state.fair_key("l", one) == pytest.approx((0.5, 2 / 8))


# --- the field tables (issue 27) -----------------------------------------------------------------
#
# Issue 27: "docs list every Kueue and HyperPod field with 'as Kueue / as HyperPod', 'differs:
# how' or 'refused: why', generated from the importers' own tables so it cannot drift." The
# field list is Kueue's own: tests/fixtures/contracts/kueue-fields.txt, from its Go API types.

CONTRACTS = Path(__file__).parent / "fixtures" / "contracts"
TABLES = {**OBJECTS, "Configuration": CONFIGURATION, "kinds": KINDS, "workload": KEYS}
IDENTITY = {"apiVersion", "kind", "metadata"}
"""Read before a kind's table applies (to tell the kind and its name), so not through it."""


def kueue_fields() -> list[tuple[str, str]]:
    """(kind, path) of every field of Kueue's types; kind ``*`` is every kind's, ``workload``
    the labels and annotations of workloads (``label kueue.x-k8s.io/queue-name``)."""
    lines = (CONTRACTS / "kueue-fields.txt").read_text().splitlines()
    found = [line.split(maxsplit=1) for line in lines if line.strip() and not line.startswith("#")]
    assert all(len(f) == 2 for f in found)
    return [(kind, path) for kind, path in found]


def test_every_field_of_kueues_types_has_a_rule() -> None:
    """Every field of Kueue's API types (ClusterQueue, Cohort, ResourceFlavor, LocalQueue,
    WorkloadPriorityClass, Topology, the Configuration) and every label and annotation Kueue
    reads or writes on workloads is read, refused with a reason, or bookkeeping, by a rule of
    the importers' tables: none is ignored silently."""
    missing = [
        f"{kind} {path}"
        for kind, path in kueue_fields()
        for table in ([*OBJECTS.values(), CONFIGURATION] if kind == "*" else [TABLES[kind]])
        if table.covering(path) is None
    ]
    assert missing == []


def test_the_tables_name_only_fields_kueue_has() -> None:
    """A rule for a field Kueue's types lack is a typo (or a field Kueue dropped): each rule
    names a field of the list, or one inside a field of a Kubernetes type (metadata, a
    LabelSelector), where the list stops, or a mistake fleetshare refuses by name (the
    priority-class label given as an annotation)."""
    upstream: dict[str, set[str]] = {}
    for kind, path in kueue_fields():
        for name in [*OBJECTS, "Configuration"] if kind == "*" else [kind]:
            upstream.setdefault(name, set()).add(path)
    upstream["workload"].add("annotation kueue.x-k8s.io/priority-class")
    strays = []
    for name, table in TABLES.items():
        known = upstream[name]
        leaves = {
            p
            for p in known
            if not any(q.startswith(f"{p}.") or q.startswith(f"{p}[]") for q in known)
        }
        for rule in table.rules:
            above = [rule.path.rsplit(".", n)[0] for n in range(rule.path.count("."), 0, -1)]
            if rule.path not in known and not any(a.removesuffix("[]") in leaves for a in above):
                strays.append(f"{name} {rule.path}")
    assert strays == []


def every_field() -> str:
    return (CONTRACTS / "kueue-every-field.yaml").read_text()


def test_every_field_the_tables_read_is_read() -> None:
    """A field the tables say is read, as Kueue or differing, is read by the importer: the
    input with each of them (written from Kueue's API) reads each through its table."""
    report = ImportReport()
    import_kueue(every_field(), report)
    unread = [
        f"{table.name}:{rule.path}"
        for table in [*OBJECTS.values(), CONFIGURATION]
        for rule in table.read()
        if rule.path not in IDENTITY and f"{table.name}:{rule.path}" not in report.reads
    ]
    assert unread == []


def put(doc: dict[str, Any], path: str, value: Any) -> str:
    """Set ``path`` (``[]``: the first item) in ``doc``; the path with the indexes used."""
    node: Any = doc
    parts = path.split(".")
    for part in parts[:-1]:
        key, items = part.removesuffix("[]"), part.endswith("[]")
        node = node.setdefault(key, [{}] if items else {})
        node = node[0] if items else node
    node[parts[-1]] = value
    return path.replace("[]", "[0]")


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (table.name, rule.path)
        for table in [*OBJECTS.values(), CONFIGURATION]
        for rule in table.rules
        if rule.verdict == "refused"
    ],
)
def test_a_refused_field_is_noted_with_the_tables_reason(kind: str, path: str) -> None:
    """Each refused field, present in otherwise valid objects, is noted with the reason its
    rule gives, so docs/fields.md says what the import says."""
    docs = list(yaml.safe_load_all(every_field()))
    doc = next(d for d in docs if d["kind"] == kind)
    where = put(doc, path, "x")
    report = ImportReport()
    import_kueue(docs, report)
    ref = f"{kind}/{doc['metadata']['name']}"
    if kind == "LocalQueue":
        ref = f"{kind}/{doc['metadata']['namespace']}/{doc['metadata']['name']}"
    rule = TABLES[kind].rule(path)
    assert rule is not None
    assert report.noted[f"{ref}.{where}"] == f"{rule.note}; ignored"


def test_a_kind_the_tables_refuse_is_noted_with_the_reason() -> None:
    """AdmissionCheck: "admission checks are not implemented in governance"."""
    docs = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": "a"},
        }
    ]
    policy = import_kueue(docs)
    rule = KINDS.rule("AdmissionCheck")
    assert (
        rule is not None
        and f"AdmissionCheck/a: kind AdmissionCheck: {rule.note}; ignored" in policy.notes
    )


def test_the_workload_keys_read_are_those_the_reader_reads() -> None:
    """Kueue: QueueLabel "is the label key in the workload that holds the queue name";
    WorkloadPriorityClassLabel "is the label key in the workload that holds the
    workloadPriorityClass name". The rules that say a key is read name the keys the manifest
    reader reads: those two labels, a pod group's label and annotations, job-min-parallelism,
    and the template's podset-required/preferred-topology."""
    read = {rule.path for rule in KEYS.read()}
    assert read == {
        *(f"label {key}" for key in (QUEUE_LABEL, PRIORITY_LABEL, POD_GROUP_LABEL)),
        *(f"annotation {key}" for key in (MIN_PARALLELISM, *GROUP_ANNOTATIONS)),
        *(f"template annotation {key}" for key in TOPOLOGY_ANNOTATIONS),
    }


def test_workload_keys_not_read_are_noted_with_their_reason() -> None:
    """kueue.x-k8s.io/retriable-in-group and podset-group-name are refused with their rules'
    reasons, a key Kueue sets (job-uid) passes in silence, and an unknown one is not
    modelled."""
    data = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j",
            "labels": {QUEUE_LABEL: "q", "kueue.x-k8s.io/job-uid": "1"},
            "annotations": {"kueue.x-k8s.io/retriable-in-group": "false"},
        },
        "spec": {
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-group-name": "g"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": 1}}}]},
            },
            "suspend": True,
        },
    }
    data["metadata"]["annotations"]["kueue.x-k8s.io/future"] = "x"
    notes = [note.split(": ", 1)[1] for note in parse_manifest(data).notes]
    retriable = key_rule("annotation", "kueue.x-k8s.io/retriable-in-group")
    group = key_rule("template annotation", "kueue.x-k8s.io/podset-group-name")
    assert retriable is not None and group is not None
    assert f"metadata.annotations.kueue.x-k8s.io/retriable-in-group: {retriable.note}" in notes
    assert (
        f"spec.template.metadata.annotations.kueue.x-k8s.io/podset-group-name: {group.note}"
        in notes
    )
    assert "metadata.annotations.kueue.x-k8s.io/future: not modelled" in notes
    assert not any("job-uid" in note for note in notes)
