"""Kueue's queue settings: StrictFIFO, borrowWithinCohort and admission fair sharing.

Written from Kueue's documentation (concepts/cluster_queue: "Queueing strategy" and
"Preemption"; concepts/preemption: "Classic Preemption"; concepts/admission_fair_sharing and
the Configuration's ``admissionFairSharing``). The named scenarios under ``tests/scenarios``
(kueue-strict-fifo-blocks, kueue-borrow-within-cohort, kueue-admission-fair-sharing) show each
on a small cluster; these tests pin the importer's mapping, the usage arithmetic and a few
finer points.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetshare.governance.fair_admission import UsageLedger, alpha
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.kueue import import_kueue
from fleetshare.policy.schema import (
    AdmissionFairSharing,
    BorrowWithinCohortPolicy,
    PolicyError,
    QueueingStrategy,
    Team,
)
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import Runner
from tests.conftest import load_case, run_case
from tests.test_preemption_loops import borrowing_cohorts

FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
"""


def queue(name: str, spec: str) -> str:
    return f"""
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{{name: default-flavor, resources: [{{name: cpu, nominalQuota: 4}}]}}]
{spec}"""


def problems(text: str) -> dict[str, str]:
    with pytest.raises(PolicyError) as excinfo:
        import_kueue(text)
    return dict(excinfo.value.problems)


# --- the importer ------------------------------------------------------------------------------


def test_queueing_strategy_is_mapped() -> None:
    policy = import_kueue(FLAVOR + queue("a", "  queueingStrategy: StrictFIFO") + queue("b", ""))
    assert policy.team("a").queueing_strategy is QueueingStrategy.STRICT_FIFO
    assert policy.team("b").queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert not any("queueingStrategy" in n for n in policy.notes)


def test_an_unknown_queueing_strategy_is_rejected() -> None:
    found = problems(FLAVOR + queue("a", "  queueingStrategy: Random"))
    assert "BestEffortFIFO, StrictFIFO" in found["ClusterQueue/a.spec.queueingStrategy"]


def test_borrow_within_cohort_threshold_follows_rescaled_priorities() -> None:
    """Kueue priority values 10/100/1000 become weights 33/67/100 (0 stays 0); a threshold of
    500 admits victims up to the class of value 100, weight 67."""
    classes = "".join(
        f"---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\n"
        f"metadata: {{name: {n}}}\nvalue: {v}\n"
        for n, v in (("low", 10), ("mid", 100), ("high", 1000))
    )
    spec = """  preemption:
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 500}"""
    policy = import_kueue(FLAVOR + classes + queue("a", spec))
    borrow = policy.team("a").borrow_within_cohort
    assert borrow.policy is BorrowWithinCohortPolicy.LOWER_PRIORITY
    assert borrow.max_priority_threshold == 67
    assert any("maxPriorityThreshold: priority 500 is weight 67" in n for n in policy.notes)


def test_borrow_within_cohort_without_reclaim_is_rejected_as_kueue_does() -> None:
    spec = "  preemption:\n    borrowWithinCohort: {policy: LowerPriority}"
    found = problems(FLAVOR + queue("a", spec))
    assert (
        "reclaimWithinCohort" in found["ClusterQueue/a.spec.preemption.borrowWithinCohort.policy"]
    )


def test_borrow_within_cohort_has_no_effect_with_fair_sharing_and_says_so() -> None:
    config = (
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing: {}\n---\n"
    )
    spec = """  preemption:
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority}"""
    policy = import_kueue(config + FLAVOR + queue("a", spec))
    assert any(
        n.startswith("ClusterQueue/a.spec.preemption.borrowWithinCohort: no effect with fair")
        for n in policy.notes
    )


def test_admission_fair_sharing_settings_are_mapped() -> None:
    config = """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
admissionFairSharing:
  usageHalfLifeTime: 168h
  usageSamplingInterval: 5m
  resourceWeights: {cpu: 2.0, memory: 0}
---
"""
    local = """
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: ns, name: heavy}
spec: {clusterQueue: a, fairSharing: {weight: "2"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: ns, name: light}
spec: {clusterQueue: a}
"""
    spec = "  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}"
    policy = import_kueue(config + FLAVOR + queue("a", spec) + queue("b", "") + local)
    assert policy.cluster.admission_fair_sharing == AdmissionFairSharing(
        usage_half_life_seconds=168 * 3600,
        usage_sampling_seconds=300,
        resource_weights={"cpu": 2.0, "memory": 0.0},
    )
    a = policy.team("a")
    assert a.admission_fair_sharing and not policy.team("b").admission_fair_sharing
    assert a.local_queues == ["ns/heavy", "ns/light"]
    assert a.local_queue_weights == {"ns/heavy": 2.0}


def test_admission_scope_without_the_configuration_section_is_noted() -> None:
    spec = "  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}"
    policy = import_kueue(FLAVOR + queue("a", spec))
    assert any(n.startswith("ClusterQueue/a.spec.admissionScope: no effect") for n in policy.notes)


@pytest.mark.parametrize(
    ("field", "value"), [("usageHalfLifeTime", "a week"), ("usageSamplingInterval", "5")]
)
def test_bad_durations_are_rejected(field: str, value: str) -> None:
    config = (
        "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        f"admissionFairSharing: {{{field}: '{value}'}}\n---\n"
    )
    found = problems(config + FLAVOR + queue("a", ""))
    assert "not a duration" in found[f"Configuration.admissionFairSharing.{field}"]


# --- the policy schema ---------------------------------------------------------------------------


def test_borrow_within_cohort_needs_a_reclaim_policy() -> None:
    with pytest.raises(ValueError, match="reclaim policy other than Never"):
        Team(name="t", reclaim="Never", borrow_within_cohort={"policy": "LowerPriority"})


def test_local_queue_weights_name_the_teams_queues() -> None:
    with pytest.raises(ValueError, match="not among local_queues: ns/other"):
        Team(name="t", local_queues=["ns/q"], local_queue_weights={"ns/other": 2})


# --- usage arithmetic --------------------------------------------------------------------------


def job(name: str, queue: str, cpu: int, team: str = "t") -> Workload:
    return Workload(name, team, (PodSet("main", 1, parse_resources({"cpu": cpu})),), queue=queue)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 8)), min_size=1, max_size=12),
    st.sampled_from((10.0, 60.0, 300.0)),
    st.sampled_from((0.0, 60.0, 3600.0)),
)
def test_closed_form_sampling_equals_sample_by_sample(
    steps: list[tuple[int, int]], sampling: float, half_life: float
) -> None:
    """The ledger jumps over any number of samples at once; sampling every interval by hand
    (consumed <- (1 - a) consumed + a usage, a = 1 - 0.5^(interval / half-life)) gives the
    same consumed usage."""
    settings_ = AdmissionFairSharing(
        usage_half_life_seconds=half_life, usage_sampling_seconds=sampling
    )
    ledger = UsageLedger(settings_)
    ledger.advance(0.0)
    a = alpha(sampling, half_life)
    expected, now, taken, usage = 0.0, 0.0, 0, 0
    for gap, cpus in steps:
        now += gap * 7.0
        ledger.advance(now)
        while (taken + 1) * sampling <= now + 1e-9:  # samples see the usage held until now
            expected = (1 - a) * expected + a * usage
            taken += 1
        usage = cpus
        running = [job("r", "ns/q", cpus)] if cpus else []
        ledger.observe(running, {"t"})
        got = ledger.consumed.get("ns/q", {}).get("cpu", 0.0)
        assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)


def test_entry_penalty_counts_at_once_and_is_folded_into_the_next_sample() -> None:
    settings_ = AdmissionFairSharing(usage_half_life_seconds=600, usage_sampling_seconds=60)
    ledger = UsageLedger(settings_)
    ledger.advance(0.0)
    ledger.admitted(job("w", "ns/q", 4))
    a = alpha(60, 600)
    assert ledger.scores({}) == {"ns/q": pytest.approx(4 * a)}
    ledger.advance(60.0)  # nothing ran: consumed = the penalty, no penalty pending
    assert ledger.penalty == {}
    assert ledger.scores({"ns/q": 2.0}) == {"ns/q": pytest.approx(2 * a)}


# --- decisions -----------------------------------------------------------------------------------


def fair_policy(weights: dict[str, float] | None = None, half_life: float = 600) -> dict[str, Any]:
    return {
        "cluster": {
            "fair_share": False,
            "starvation_guard_seconds": None,
            "admission_fair_sharing": {
                "usage_half_life_seconds": half_life,
                "usage_sampling_seconds": 60,
            },
        },
        "teams": [
            {
                "name": "shared",
                "quota": [{"resources": {"cpu": 4}}],
                "local_queues": ["ns/a", "ns/b"],
                "admission_fair_sharing": True,
                "local_queue_weights": weights or {},
            }
        ],
    }


NODE = [{"name": "n", "allocatable": {"cpu": 4, "memory": "16Gi"}}]


def admitted_order(out: dict[str, Any]) -> list[str]:
    return [e["workload"] for e in out["events"] if e["event"] == "admit"]


def test_entry_penalty_interleaves_a_burst_from_two_local_queues() -> None:
    """Kueue's documented reason for the entry penalty: a tenant submitting many workloads at
    once does not get them all admitted before its usage is updated. Four 1-cpu jobs from a
    (submitted first) and four from b arrive together with room for four: they alternate."""
    jobs = [
        {"name": f"{q}{i}", "queue": f"ns/{q}", "at": 0, "duration": 10, "requests": {"cpu": 1}}
        for q in "ab"
        for i in range(4)
    ]
    out = run_case(fair_policy(), NODE, jobs)
    assert admitted_order(out)[:4] == ["a0", "b0", "a1", "b1"]
    plain = fair_policy()
    plain["teams"][0]["admission_fair_sharing"] = False
    assert admitted_order(run_case(plain, NODE, jobs))[:4] == ["a0", "a1", "a2", "a3"]


def test_a_local_queue_weight_divides_its_usage() -> None:
    """b (weight 4) used twice as much as a, so it counts half: b's job goes first."""
    jobs = [
        {"name": "a-hist", "queue": "ns/a", "at": 0, "duration": 100, "requests": {"cpu": 1}},
        {"name": "b-hist", "queue": "ns/b", "at": 0, "duration": 100, "requests": {"cpu": 2}},
        {"name": "a1", "queue": "ns/a", "at": 50, "duration": 10, "requests": {"cpu": 4}},
        {"name": "b1", "queue": "ns/b", "at": 60, "duration": 10, "requests": {"cpu": 4}},
    ]
    weighted = run_case(fair_policy({"ns/b": 4.0}), NODE, jobs)
    assert admitted_order(weighted)[2:] == ["b1", "a1"]
    assert admitted_order(run_case(fair_policy(), NODE, jobs))[2:] == ["a1", "b1"]


def test_no_half_life_leaves_priority_then_fifo() -> None:
    """Kueue: with usageHalfLifeTime 0 usage is reset at once (and no penalty is charged)."""
    jobs = [
        {"name": "a-hist", "queue": "ns/a", "at": 0, "duration": 100, "requests": {"cpu": 4}},
        {"name": "a1", "queue": "ns/a", "at": 50, "duration": 10, "requests": {"cpu": 4}},
        {"name": "b1", "queue": "ns/b", "at": 60, "duration": 10, "requests": {"cpu": 4}},
    ]
    out = run_case(fair_policy(half_life=0), NODE, jobs)
    assert admitted_order(out) == ["a-hist", "a1", "b1"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(borrowing_cohorts(), st.booleans())
def test_preempting_to_borrow_takes_the_plain_algorithms_decisions(
    data: dict[str, Any], fair: bool
) -> None:
    """With the shortcuts (shape failures, carried searches, the key-order path) as without,
    also with admission fair sharing over two local queues per team."""
    if fair:
        data["policy"]["cluster"]["admission_fair_sharing"] = {"usage_half_life_seconds": 60}
        for team in data["policy"]["teams"]:
            team["local_queues"] = [f"{team['name']}/a", f"{team['name']}/b"]
            team["admission_fair_sharing"] = True
        for i, spec in enumerate(data["workloads"]):
            spec["team"] = f"{spec['team']}/{'ab'[i % 2]}"
    fast = to_json(Runner(load_case(data)).run())
    assert fast == to_json(Runner(load_case(data), reference=True).run())
