"""The pending book that the scenario runner, the service backend and the services simulator
share: the engine's index, fed its consecutive views, must hold exactly what an index built
from the full list holds (the fast path and the plain path decide the same)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetshare.governance.queues import PendingBook, PendingIndex, same_nodes
from fleetshare.governance.quota import compile_policy
from fleetshare.model.workload import PodSet, Workload
from fleetshare.policy.schema import load_policy

POLICY = load_policy(
    {
        "teams": [
            {"name": "a", "quota": [{"flavor": "default", "resources": {"cpu": 8}}]},
            {"name": "b", "quota": [{"flavor": "default", "resources": {"cpu": 8}}]},
        ]
    }
)
MODEL = compile_policy(POLICY, None)

# (op, name index, team, cpu, priority): op 0 = put, 1 = take, 2 = view
OPS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 7),
        st.sampled_from(["a", "b"]),
        st.sampled_from([1000, 2000]),
        st.integers(0, 2),
    ),
    max_size=60,
)


def _contents(index: PendingIndex) -> dict[str, tuple[object, object, int]]:
    return {n: (shape.key, key, id(wl)) for n, (shape, key, wl) in index.by_name.items()}


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_index_fed_views_equals_index_built_from_the_list(ops: list[tuple[int, ...]]) -> None:
    book = PendingBook()
    fast, source = PendingIndex(), object()
    t = 0.0
    for op, i, team, cpu, priority in [*ops, (2, 0, "a", 0, 0)]:
        name = f"w{i}"
        if op == 0:
            t += 1
            podsets = (PodSet("main", 1, {"cpu": cpu}),)
            book.put(Workload(name, team, podsets, submit_time=t, priority=priority))
        elif op == 1:
            taken = book.take(name)
            assert name not in book
            assert taken is None or taken.name == name
        else:
            fast.update(MODEL, book.view(source))
            plain = PendingIndex()
            plain.update(MODEL, list(book.values()))
            assert _contents(fast) == _contents(plain)
            assert set(fast.by_name) == set(book)


def test_a_replaced_workload_leaves_and_its_successor_arrives() -> None:
    book = PendingBook()
    first = Workload("w", "a", (PodSet("main", 1, {"cpu": 1000}),))
    second = Workload("w", "a", (PodSet("main", 1, {"cpu": 2000}),))
    book.put(first)
    book.view(None)
    book.put(second)
    view = book.view(None)
    assert view.changes == [(False, first), (True, second)]
    assert list(view) == [second]
    assert book.take("missing") is None
    assert book.view(None).changes == []


def test_the_node_view_is_kept_only_while_the_same_nodes_stand_in_order() -> None:
    a, b = object(), object()
    last = (a, b)
    assert same_nodes((a, b), last) is last
    assert same_nodes((b, a), last) == (b, a)
    assert same_nodes((a,), last) == (a,)


def test_a_reason_without_its_position_is_the_reason_with_it() -> None:
    """``reason_of`` (what the operator reads for every changed reason) answers as the full
    entry does, on a cycle's lazily built result, on it materialized and on a plain
    dictionary; a workload that is not pending has no reason."""
    from fleetshare.governance.admission import CycleCache, Engine
    from fleetshare.governance.queues import PendingMap, reason_of
    from fleetshare.governance.snapshot import Snapshot
    from fleetshare.model.catalog import load_catalog
    from fleetshare.traces.kueue_generator import load

    trace = load(cohorts=1, queues_per_cohort=2, node_cpus=40)
    engine = Engine(trace.load_policy(), load_catalog())
    snapshot = Snapshot(0.0, list(trace.nodes), [], list(trace.workloads[:400]))
    lazy = engine.cycle(snapshot, CycleCache()).pending
    plain = engine.cycle(snapshot).pending
    assert isinstance(lazy, PendingMap) and not isinstance(plain, PendingMap)
    names = [w.name for w in trace.workloads[:400]]
    expected = {n: plain[n].reason for n in plain}
    assert len({*expected.values()}) > 1  # several reasons, some given in bulk
    assert {n: reason_of(lazy, n) for n in names if n in plain} == expected
    assert {n: reason_of(plain, n) for n in names if n in plain} == expected
    assert all(reason_of(lazy, n) is None for n in names if n not in plain)
    assert reason_of(lazy, "no/such-workload") is None
    lazy.materialize()
    assert {n: reason_of(lazy, n) for n in names if n in plain} == expected


def test_queue_positions_of_a_lazy_result_are_those_of_the_plain_cycle() -> None:
    """A team's pending work of several shapes: each workload's queue position (1 + the
    team's work still pending ahead of it) from the cycle's lazily built result, looked up one
    by one and materialized, equals the plain cycle's (no cache, every entry built)."""
    from fleetshare.governance.admission import CycleCache, Engine
    from fleetshare.governance.snapshot import Snapshot
    from fleetshare.model.catalog import load_catalog
    from fleetshare.traces.kueue_generator import load

    trace = load(cohorts=1, queues_per_cohort=2, node_cpus=40)
    engine = Engine(trace.load_policy(), load_catalog())
    snapshot = Snapshot(0.0, list(trace.nodes), [], list(trace.workloads[:400]))
    plain = engine.cycle(snapshot).pending
    expected = {n: plain[n].position for n in plain}
    shapes = {(w.team, repr(w.podsets)) for w in trace.workloads[:400] if w.name in plain}
    teams = {team for team, _ in shapes}
    assert len(shapes) > len(teams)  # a team's pending work comes in several shapes
    assert sorted(expected.values())[-1] > 1
    lazy = engine.cycle(snapshot, CycleCache()).pending
    assert {n: lazy[n].position for n in expected} == expected
    fresh = engine.cycle(snapshot, CycleCache()).pending
    assert {n: p.position for n, p in fresh.items()} == expected
