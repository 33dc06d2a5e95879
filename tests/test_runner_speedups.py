"""The runner's and the engine's speed-ups change nothing that is decided or reported.

The engine carries work over between a run's cycles (``CycleCache``: the state of nodes and
running work, pending work grouped by shape, the pending result built on demand) and skips work
within a cycle (a shape that failed since the last admission fails again; the rest of a cycle
in merge-key order; own-work preemption searches that cannot succeed). ``Runner(reference=True)``
and ``Engine.shortcuts = False`` turn all of that off. Mid-size random scenarios, with many
workloads of few shapes so that the shortcuts do get used, must give the same report — every
event in the same order — and every cycle the same decisions, reasons, positions and order.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fleetshare.governance.admission import CycleCache, Engine
from fleetshare.governance.snapshot import CycleResult, Running, Snapshot
from fleetshare.governance.state import CycleState, StateCache
from fleetshare.model.catalog import load_catalog
from fleetshare.scenario.loader import Scenario, load_scenario
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import Runner
from fleetshare.scenario.schema import ScenarioSpec
from fleetshare.traces import load_trace
from tests.conftest import load_case

GPU = "nvidia.com/gpu"


def random_scenario(
    seed: int, workloads: int = 150, kueue: bool = False, split: bool = False
) -> dict[str, Any]:
    """Teams in cohorts sharing a few node pools, a stream of workloads of few shapes (so that
    queues are long and shapes repeat), and every policy knob the shortcuts must respect;
    ``kueue`` adds Kueue's queue settings (StrictFIFO, borrowWithinCohort, admission fair
    sharing over local queues), drawn from a random stream of their own; ``split``: two pools,
    and some workloads a driver selecting one pool beside workers selecting the other (a
    flavor per pod set), from a stream of their own."""
    rnd = random.Random(seed)
    two_pools = rnd.random() < 0.4 or split
    pools = ["pool-a", "pool-b"] if two_pools else ["default"]
    nodes = []
    for i in range(rnd.randint(2, 5)):
        pool = pools[i % len(pools)]
        spec: dict[str, Any] = {
            "name": f"n{i}",
            "allocatable": {"cpu": 16, "memory": "64Gi", GPU: rnd.choice((2, 4, 8))},
        }
        if two_pools:
            spec["labels"] = {"pool": pool}
        nodes.append(spec)
    capacity = {
        p: sum(n["allocatable"][GPU] for j, n in enumerate(nodes) if pools[j % len(pools)] == p)
        for p in pools
    }
    n_teams = rnd.randint(3, 6)
    groups = [f"g{i}" for i in range(rnd.randint(0, 2))]
    teams = []
    for t in range(n_teams):
        quota = []
        for pool in pools:
            share = max(0, capacity[pool] // n_teams + rnd.randint(-1, 1))
            entry: dict[str, Any] = {"resources": {GPU: share}}
            if two_pools:
                entry["flavor"] = pool
            quota.append(entry)
        team: dict[str, Any] = {
            "name": f"t{t}",
            "quota": quota,
            "sharing": rnd.choice(("LendAndBorrow",) * 4 + ("Lend", "DontLend")),
            "preempt_team_tasks": rnd.choice(
                ("LowerPriority", "LowerPriority", "Never", "LowerOrNewerEqualPriority")
            ),
            "reclaim": rnd.choice(("Any", "Any", "LowerPriority", "Never")),
            "fair_share_weight": rnd.choice((1.0, 1.0, 2.0, 0.5)),
        }
        if groups and rnd.random() < 0.8:
            team["group"] = rnd.choice(groups)
        limits = []
        if rnd.random() < 0.3:
            limits.append({"resource": GPU, "absolute": rnd.randint(0, 4)})
        if rnd.random() < 0.2:
            limits.append({"resource": GPU, "percent_of_idle": rnd.choice((25, 50, 100))})
        team["borrow_limits"] = limits
        teams.append(team)
    group_specs: list[dict[str, Any]] = []
    for g in groups:
        spec = {"name": g}
        if rnd.random() < 0.4:
            spec["lending_limits"] = [{"resource": GPU, "absolute": 0}]
        group_specs.append(spec)
    classes = [
        {"name": "low", "weight": 10},
        {"name": "mid", "weight": 50, "default": True},
        {"name": "high", "weight": 90},
    ]
    cluster: dict[str, Any] = {
        "priority_classes": classes,
        "fair_share": rnd.random() < 0.35,
        "idle_resource_sharing": rnd.random() < 0.5,
        "preemption": {
            "min_runtime_seconds": rnd.choice((0, 0, 0, 20)),
            "reclaim_grace_seconds": rnd.choice((0, 0, 10)),
        },
        "starvation_guard_seconds": rnd.choice((None, None, 600, 120, 60)),
    }
    if two_pools:
        cluster["flavors"] = [{"name": p, "node_labels": {"pool": p}} for p in pools]
    shapes = [
        (1, 1, "low"),
        (1, 1, "mid"),
        (2, 1, "mid"),
        (1, 2, "high"),
        (4, 1, "high"),
        (1, 4, "low"),
        (2, 2, "mid"),
    ]
    shapes = rnd.sample(shapes, rnd.randint(2, 5))
    stream = []
    for i in range(workloads):
        count, gpus, priority = rnd.choice(shapes)
        spec = {
            "name": f"w{i:04d}",
            "team": f"t{rnd.randrange(n_teams)}" if rnd.random() > 0.02 else "ghost",
            "at": rnd.randint(0, 40) * rnd.choice((1, 5)),
            "priority": priority,
            "duration": rnd.choice((5, 10, 20, 30, 60)),
            "podsets": [{"name": "main", "count": count, "requests": {GPU: gpus, "cpu": 1}}],
        }
        stream.append(spec)
    events = []
    for _ in range(rnd.choice((0, 0, 1, 2))):
        events.append(
            {
                "at": rnd.randint(1, 60),
                "action": rnd.choice(("cordon", "uncordon", "fail", "recover")),
                "nodes": [rnd.choice(nodes)["name"]],
            }
        )
    if kueue:
        _kueue_settings(random.Random(seed * 7919 + 13), cluster, teams, stream)
    if split:
        _split_pod_sets(random.Random(seed * 104729 + 7), stream)
    return {
        "name": f"random-{seed}",
        "cluster": {"nodes": nodes, "events": events},
        "policy": {"cluster": cluster, "groups": group_specs, "teams": teams},
        "workloads": stream,
    }


def _kueue_settings(
    rnd: random.Random,
    cluster: dict[str, Any],
    teams: list[dict[str, Any]],
    stream: list[dict[str, Any]],
) -> None:
    """StrictFIFO, borrowWithinCohort and admission fair sharing on some teams; two local
    queues per team, named by most of its workloads."""
    cluster["admission_fair_sharing"] = {
        "usage_half_life_seconds": rnd.choice((0, 60, 600)),
        "usage_sampling_seconds": rnd.choice((5, 30)),
        "resource_weights": rnd.choice(({}, {"cpu": 0.0}, {"nvidia.com/gpu": 2.0})),
    }
    for team in teams:
        name = team["name"]
        team["local_queues"] = [f"ns-{name}/a", f"ns-{name}/b"]
        if rnd.random() < 0.3:
            team["queueing_strategy"] = "StrictFIFO"
        if team["reclaim"] != "Never" and rnd.random() < 0.6:
            threshold = rnd.choice((None, 10, 50, 90))
            team["borrow_within_cohort"] = {
                "policy": "LowerPriority",
                "max_priority_threshold": threshold,
            }
        if rnd.random() < 0.5:
            team["admission_fair_sharing"] = True
            if rnd.random() < 0.5:
                team["local_queue_weights"] = {f"ns-{name}/b": rnd.choice((0.5, 2.0))}
    names = {t["name"] for t in teams}
    for spec in stream:
        if spec["team"] in names and rnd.random() < 0.7:
            spec["team"] = f"ns-{spec['team']}/{rnd.choice('ab')}"


def _split_pod_sets(rnd: random.Random, stream: list[dict[str, Any]]) -> None:
    """Give some shapes a driver pod set selecting one pool beside their pods selecting the
    other (or no pool): pod sets that need different flavors."""
    shapes = sorted({(s["podsets"][0]["count"], s["priority"]) for s in stream})
    chosen = {shape: rnd.choice(("pool-a", "pool-b", None)) for shape in shapes}
    for spec in stream:
        main = spec["podsets"][0]
        pool = chosen[(main["count"], spec["priority"])]
        if pool is None:
            continue
        other = "pool-b" if pool == "pool-a" else "pool-a"
        main["node_selector"] = {"pool": other} if rnd.random() < 0.7 else {}
        driver = {"name": "driver", "count": 1, "requests": {"cpu": rnd.choice((1, 4))}}
        driver["node_selector"] = {"pool": pool}
        spec["podsets"].insert(0, driver)


def _report(data: dict[str, Any], reference: bool) -> dict[str, Any]:
    return to_json(Runner(load_case(data), reference=reference).run())


def _cycle_view(result: CycleResult) -> tuple[Any, ...]:
    return (
        [(a.workload.name, a.assignment, a.borrowed) for a in result.admissions],
        [(p.workload.name, p.by, p.reason, p.message) for p in result.preemptions],
        [(n, p.reason, p.position) for n, p in result.pending.items()],
        result.warnings,
        result.wake_at,
    )


@pytest.mark.parametrize("seed", range(16))
def test_runs_match_the_reference(seed: int) -> None:
    data = random_scenario(seed)
    assert _report(data, reference=False) == _report(data, reference=True)


@pytest.mark.parametrize("seed", range(8))
def test_runs_with_kueue_queue_settings_match_the_reference(seed: int) -> None:
    """StrictFIFO, borrowWithinCohort and admission fair sharing go through the shortcuts as
    through the plain algorithm."""
    data = random_scenario(seed, kueue=True)
    data["policy"]["cluster"]["fair_share"] = seed % 2 == 1
    assert _report(data, reference=False) == _report(data, reference=True)


@pytest.mark.parametrize("seed", [0, 1, 4, 5, 6, 9, 10, 11])
def test_runs_with_pod_sets_on_different_flavors_match_the_reference(seed: int) -> None:
    """Shapes whose pod sets select different pools (a flavor per pod set) go through the
    shortcuts as through the plain algorithm. (Seeds whose runs admit such work: in some,
    such as 2, quotas admit nothing at all.)"""
    data = random_scenario(seed, split=True, kueue=seed % 2 == 1)
    fast = _report(data, reference=False)
    assert fast == _report(data, reference=True)
    # the case is exercised: some workloads ran with a flavor per pod set
    assert any(len(w["flavors"]) > 1 for w in fast["workloads"].values())


@pytest.mark.parametrize(
    ("seed", "kueue", "split"),
    [
        *((s, False, False) for s in range(16, 24)),
        *((s, True, False) for s in range(24, 28)),
        *((s, False, True) for s in range(28, 31)),
    ],
)
def test_every_cycle_matches_the_reference(seed: int, kueue: bool, split: bool) -> None:
    """Cycle by cycle, on the snapshots a run produces: decisions, pending reasons, queue
    positions, the order of the pending entries, warnings and wake-up times; and the list of
    changed reasons is exactly the entries whose reason differs from the previous cycle's."""
    runner = Runner(load_case(random_scenario(seed, workloads=120, kueue=kueue, split=split)))
    engine = runner.engine
    reference = Engine(engine.policy, runner.scenario.catalog)
    reference.shortcuts = False
    inner = engine.cycle
    previous: dict[str, str] = {}
    cycles = 0

    def cycle(snapshot: Snapshot) -> CycleResult:
        nonlocal previous, cycles
        result = inner(snapshot)
        expected = reference.cycle(snapshot)
        assert _cycle_view(result) == _cycle_view(expected)
        reasons = {name: p.reason for name, p in expected.pending.items()}
        changed = [n for n, r in reasons.items() if previous.get(n) != r]
        assert result.pending_changed == changed
        previous = reasons
        cycles += 1
        return result

    engine.cycle = cycle  # type: ignore[method-assign]
    runner.run()
    assert cycles > 10


def test_a_small_kueue_generator_run_matches_the_reference() -> None:
    """Kueue's scheduler benchmark, one cohort of two queues: long queues of three shapes."""
    trace = load_trace("kueue-generator", cohorts=1, queues_per_cohort=2, node_cpus=40)
    workloads = trace.workloads[:600]
    policy = trace.load_policy()
    spec = ScenarioSpec.model_validate({"cluster": {"nodes": []}, "policy": {}})

    def run(reference: bool) -> dict[str, Any]:
        scenario = Scenario(
            "kueue", "", trace.nodes, [], policy, workloads, [], None, {}, load_catalog(), spec
        )
        return to_json(Runner(scenario, reference=reference).run())

    fast = run(False)
    assert fast == run(True)
    # long queues: most of the work waited, so the shortcuts had queues to go through
    waited = [w for w in fast["workloads"].values() if w["admitted_at"] > w["submitted_at"]]
    assert len(waited) > 30


@pytest.mark.parametrize("seed", range(4))
def test_the_state_cache_gives_the_state_a_fresh_build_gives(seed: int) -> None:
    """Forks of the carried base equal a state built from scratch from the same snapshot."""
    runner = Runner(load_case(random_scenario(seed, workloads=80)))
    engine = runner.engine
    cache = StateCache()
    inner = engine.cycle

    def cycle(snapshot: Snapshot) -> CycleResult:
        fresh = CycleState(engine.model, engine.policy.cluster, snapshot)
        forked = cache.state(engine.model, engine.policy.cluster, snapshot)
        assert _state_view(forked) == _state_view(fresh)
        return inner(snapshot)

    engine.cycle = cycle  # type: ignore[method-assign]
    runner.run()
    assert cache.rebuilds >= 1


def _state_view(state: CycleState) -> tuple[Any, ...]:
    teams = sorted(state.model.teams)
    frs = sorted(state.model.governed)
    return (
        {n: e.workload for n, e in state.admitted.items()},
        {t: sorted(e.workload.name for e in state.by_team.get(t, [])) for t in teams},
        [
            (t, fr, state.tree.usage(t, fr), state.tree.available(t, fr))
            for t in teams
            for fr in frs
        ],
        state.fit.free.tolist(),
        state.capacity,
        state.warnings,
    )


def test_a_cache_used_out_of_order_still_gives_the_plain_results() -> None:
    """The cache checks what it is given: snapshots in any order, repeated, or with other
    running work give the same results as cycles without a cache."""
    data = random_scenario(99, workloads=60)
    runner = Runner(load_case(data))
    snapshots: list[Snapshot] = []
    inner = runner.engine.cycle

    def record(snapshot: Snapshot) -> CycleResult:
        snapshots.append(snapshot)
        return inner(snapshot)

    runner.engine.cycle = record  # type: ignore[method-assign]
    runner.run()
    engine = Engine(runner.engine.policy, runner.scenario.catalog)
    cache = CycleCache()
    order = list(range(len(snapshots)))
    random.Random(3).shuffle(order)
    for i in order + order[:5]:
        with_cache = engine.cycle(snapshots[i], cache)
        plain = engine.cycle(snapshots[i])
        assert _cycle_view(with_cache) == _cycle_view(plain)


def test_queue_positions_and_reasons_at_the_end_are_those_of_the_last_cycle() -> None:
    """Only changed reasons are reported cycle by cycle; every pending record still ends with
    the last cycle's reason and queue position."""
    data = random_scenario(7, workloads=200)
    data["until"] = 30
    result = Runner(load_case(data)).run()
    reference = Runner(load_case(data), reference=True).run()
    for name, record in result.records.items():
        other = reference.records[name]
        assert (record.pending_reason, record.queue_position) == (
            other.pending_reason,
            other.queue_position,
        )
    assert any(r.queue_position for r in result.records.values())


def test_running_entries_are_not_left_flagged_by_a_failed_search() -> None:
    """Preemption searches flip ``removed`` on shared entries; the next cycle starts clean."""
    data = random_scenario(5, workloads=100)
    runner = Runner(load_case(data))
    inner = runner.engine.cycle

    def cycle(snapshot: Snapshot) -> CycleResult:
        result = inner(snapshot)
        return result

    runner.engine.cycle = cycle  # type: ignore[method-assign]
    runner.run()
    base = runner.cache.state._base
    assert base is not None
    assert not any(e.removed for e in base.admitted.values())


def test_running_records_with_identity() -> None:
    """Running work is matched by identity: an equal but new Running object is a restart."""
    data = random_scenario(11, workloads=30)
    runner = Runner(load_case(data))
    runner.run()
    engine = runner.engine
    cache = CycleCache()
    nodes = tuple(runner.nodes.values())
    wl = runner.scenario.workloads[0]
    first = Snapshot(0.0, nodes, [], [wl])
    result = engine.cycle(first, cache)
    if not result.admissions:
        pytest.skip("the first workload does not fit this cluster")
    admission = result.admissions[0]
    running = Running(wl, admission.assignment, 0.0)
    again = Running(wl, admission.assignment, 0.0)
    one = engine.cycle(Snapshot(1.0, nodes, [running], []), cache)
    two = engine.cycle(Snapshot(1.0, nodes, [again], []), cache)
    assert _cycle_view(one) == _cycle_view(two)
    assert next(iter(cache.state._entries.values()))[0] is again


_ROOT = Path(__file__).resolve().parent.parent
AUTOSCALED = sorted(
    p
    for folder in (_ROOT / "src/fleetshare/scenarios", _ROOT / "tests/scenarios")
    for p in folder.glob("*.yaml")
    if "node_pools:" in p.read_text() and "\nservices:" not in p.read_text()
)  # scenarios with services run on the services path (tests/inference)


@pytest.mark.parametrize("path", AUTOSCALED, ids=lambda p: p.stem)
def test_autoscaled_runs_match_the_reference(path: Path) -> None:
    """The autoscaler builds each step's governance state from the last one's (a
    :class:`StateCache`); the reference run builds it from scratch: same events."""
    fast = to_json(Runner(load_scenario(path)).run())
    assert fast == to_json(Runner(load_scenario(path), reference=True).run())


@pytest.mark.parametrize("path", AUTOSCALED, ids=lambda p: p.stem)
def test_the_state_cache_follows_nodes_joining_and_leaving(path: Path) -> None:
    """Autoscaled runs change the nodes often: the cache then reloads the running work in one
    go (:meth:`CycleState.load_all`), which must give the state a fresh build gives."""
    runner = Runner(load_scenario(path))
    engine = runner.engine
    cache = StateCache()
    inner = engine.cycle

    def cycle(snapshot: Snapshot) -> CycleResult:
        fresh = CycleState(engine.model, engine.policy.cluster, snapshot)
        forked = cache.state(engine.model, engine.policy.cluster, snapshot)
        assert _state_view(forked) == _state_view(fresh)
        assert forked.admitted_times == fresh.admitted_times
        return inner(snapshot)

    engine.cycle = cycle  # type: ignore[method-assign]
    runner.run()
    assert cache.rebuilds >= 2  # nodes changed during the run
