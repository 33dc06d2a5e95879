"""The quota tree's definitions (docs/architecture.md, "The quota tree") on a hand-built case."""

from __future__ import annotations

from fleetshare.governance.quota import compile_policy
from fleetshare.governance.tree import QuotaTree
from fleetshare.model.resources import CPU
from fleetshare.policy.schema import load_policy

FR = ("default", CPU)
K = 1000  # one CPU in milli-units


def _tree() -> QuotaTree:
    """20 CPUs. Group g holds a (quota 4, lends at most 1) and b (quota 6); c (quota 6, borrows
    at most 2) hangs under the root. Quotas total 16, so with idle sharing the root's own quota
    is the 4 unallocated. a uses 2, b 8, c nothing."""
    policy = load_policy(
        {
            "groups": [{"name": "g"}],
            "teams": [
                {
                    "name": "a",
                    "group": "g",
                    "quota": [{"resources": {CPU: 4}}],
                    "lending_limits": [{"resource": CPU, "absolute": 1}],
                },
                {"name": "b", "group": "g", "quota": [{"resources": {CPU: 6}}]},
                {
                    "name": "c",
                    "quota": [{"resources": {CPU: 6}}],
                    "borrow_limits": [{"resource": CPU, "absolute": 2}],
                },
            ],
        }
    )
    tree = QuotaTree(compile_policy(policy, None), {FR: 20 * K}, idle_sharing=True)
    tree.add("a", {FR: 2 * K})
    tree.add("b", {FR: 8 * K})
    return tree


def test_available_borrowed_and_idle_follow_the_written_definitions() -> None:
    """By hand. kept(a) = max(0, 4 - 1) = 3; subtree(g) = 0 + (4 - 3) + (6 - 0) = 7;
    subtree(root) = 4 unallocated + 7 + 6 = 17. usage(g) = max(0, 2 - 3) + max(0, 8 - 0) = 8,
    usage(root) = 8, so available(root) = 17 - 8 = 9 and available(g) = max(0, 0 - 8) + 9 = 9.
    available(a) = max(0, 3 - 2) + 9 = 10; available(b) = 0 + 9 = 9; available(c) = 0 +
    min(9, 6 - 0 - 0 + 2) = 8 (its borrowing limit binds). borrowed(b) = max(0, 8 - 6) = 2.
    idle_for: 4 unallocated + 0 group quota + the others' unused quota capped by their lending
    limit (a: min(2, 1) = 1, b: 0, c: 6): a 4 + 0 + 6 = 10, b 4 + 1 + 6 = 11, c 4 + 1 + 0 = 5."""
    tree = _tree()
    assert tree.pool_available(FR) == 9 * K
    assert tree.lendable_pool(FR) == 17 * K
    assert [tree.available(n, FR) for n in ("g", "a", "b", "c")] == [9 * K, 10 * K, 9 * K, 8 * K]
    assert [tree.borrowed(t, FR) for t in ("a", "b", "c")] == [0, 2 * K, 0]
    assert [tree.idle_for(t, FR) for t in ("a", "b", "c")] == [10 * K, 11 * K, 5 * K]


def test_without_idle_sharing_the_root_holds_no_unallocated_quota() -> None:
    """The same case with idle resource sharing off: subtree(root) = 7 + 6 = 13, so
    available(root) = 13 - 8 = 5, available(a) = 1 + 5 = 6, available(c) = min(5, 8) = 5, and
    idle_for loses the 4 unallocated CPUs (c: 1)."""
    tree = _tree()
    off = QuotaTree(tree.model, {FR: 20 * K}, idle_sharing=False)
    off.add("a", {FR: 2 * K})
    off.add("b", {FR: 8 * K})
    assert off.pool_available(FR) == 5 * K
    assert [off.available(n, FR) for n in ("a", "b", "c")] == [6 * K, 5 * K, 5 * K]
    assert off.idle_for("c", FR) == 1 * K
