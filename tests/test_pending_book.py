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
