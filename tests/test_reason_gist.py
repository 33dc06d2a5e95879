"""A pending reason's substance is typed: its key (``Gist``) comes from where the reason is
composed, so "the same reason with other numbers" is a comparison of keys, never a reading of
the message. Reasons are built here by the real composers (an admission cycle, the node fit),
not written by hand."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fleetshare.control.changes import AutoscalerNote, PendingReasonChanged
from fleetshare.governance.admission import Engine
from fleetshare.governance.queues import new_in_substance, reason_gist
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.model.node import Node
from fleetshare.model.reason import WORDS, PendingReason, joined
from fleetshare.model.workload import PodSet, Workload
from fleetshare.placement.fit import NodeFit, NoFit
from fleetshare.policy.schema import load_policy
from fleetshare.scenario.loader import load_scenario
from fleetshare.scenario.runner import Runner
from tests.decision_stream import Recorder

MILLI = 1000
GIB = 2**30 * MILLI


def _engine(**team: Any) -> Engine:
    """Teams ``a`` and ``b`` sharing flavors ``x`` and ``y`` (8 CPUs and 32 GiB each, per
    team and flavor), reclaiming nothing (a reason is not preempted away)."""
    quota = [{"flavor": flavor, "resources": {"cpu": 8, "memory": "32Gi"}} for flavor in ("x", "y")]
    teams = [{"name": name, "quota": quota, "reclaim": "Never", **team} for name in ("a", "b")]
    flavors = [{"name": f, "node_labels": {"pool": f}} for f in ("x", "y")]
    cluster = {"flavors": flavors, "starvation_guard_seconds": None}
    return Engine(load_policy({"cluster": cluster, "teams": teams}))


NODES = [Node(f"{p}-0", {"cpu": 16 * MILLI, "memory": 64 * GIB}, labels={"pool": p}) for p in "xy"]
"""As much as the quotas: no idle capacity beyond them to borrow."""


def _job(name: str, team: str, cpu: float, memory: int = 1, pool: str = "x") -> Workload:
    podset = PodSet("main", 1, {"cpu": int(cpu * MILLI), "memory": memory * GIB}, {"pool": pool})
    return Workload(name=name, team=team, podsets=(podset,), submit_time=0.0)


def _why(wl: Workload, running: Sequence[Running] = (), **team: Any) -> PendingReason:
    """Why the cycle leaves ``wl`` pending beside ``running``."""
    result = _engine(**team).cycle(Snapshot(0.0, NODES, list(running), [wl]))
    assert not result.admissions
    return result.pending[wl.name].reason


def _running(wl: Workload) -> Running:
    """``wl`` admitted alone (as it runs)."""
    [admission] = _engine().cycle(Snapshot(0.0, NODES, [], [wl])).admissions
    return Running(wl, admission.assignment, 0.0)


def _same(before: PendingReason, after: PendingReason) -> bool:
    return not new_in_substance(before, after)


def test_reasons_differing_only_in_amounts_are_the_same_in_substance() -> None:
    """Borrowing short on x's CPU by more or less: other words, the same reason."""
    borrower = _running(_job("b-run", "b", 14))  # b borrows 6 of a's 8 CPUs on x
    more = _why(_job("w", "a", 12), [borrower])
    most = _why(_job("w", "a", 15), [borrower])
    assert more != most and more.category == most.category == "quota"
    assert "cpu on x" in more and "cpu on x" in most
    assert _same(more, most) and reason_gist(more) == reason_gist(most)
    assert new_in_substance(None, more)  # nothing said before: new


def test_reasons_differing_in_team_flavor_resource_or_kind_are_not() -> None:
    """The same shortfall said of another team, on another flavor, of another resource, or
    a shortfall of another kind (the team's own quota lent out), is new in substance."""
    on_x = _running(_job("b-run", "b", 14))
    short = _why(_job("w", "a", 12), [on_x])
    other_team = _why(_job("w", "b", 12), [_running(_job("a-run", "a", 14))])
    other_flavor = _why(_job("w", "a", 12, pool="y"), [_running(_job("b-run", "b", 14, pool="y"))])
    by_memory = _running(_job("b-run", "b", 1, memory=56))
    other_resource = _why(_job("w", "a", 1, memory=40), [by_memory])
    lent_out = _why(_job("w", "a", 4), [_running(_job("b-run", "b", 16))])
    assert "is lent out" in lent_out and "is lent out" not in short
    for other in (other_team, other_flavor, other_resource, lent_out):
        assert other.category == "quota"
        assert new_in_substance(short, other) and new_in_substance(other, short)


def test_a_node_fits_reason_is_keyed_without_its_counts() -> None:
    """No room for 3 or for 4 pods on x's nodes: the same; on y, or another pod set: not."""
    fit = NodeFit(NODES, {n.name: n.labels["pool"] for n in NODES})
    for node in NODES:  # every node nearly full
        fit.apply([PodSet("filler", 1, {"cpu": 15 * MILLI})], [[(fit.index[node.name], 1)]], 1)

    def no_fit(count: int, pool: str = "x", name: str = "main") -> NoFit:
        podset = PodSet(name, count, {"cpu": 2 * MILLI}, {"pool": pool})
        plan = fit.place((pool,), (podset,))
        assert isinstance(plan, NoFit)
        return plan

    assert no_fit(3).message != no_fit(4).message and no_fit(3).gist == no_fit(4).gist
    assert no_fit(3).gist != no_fit(3, pool="y").gist
    assert no_fit(3).gist != no_fit(3, name="other").gist


def test_joined_wrapped_and_noted_reasons_are_keyed_by_their_parts() -> None:
    """A reason made of others: the same when its parts are the same in substance."""
    borrower = _running(_job("b-run", "b", 14))
    short, shorter = _why(_job("w", "a", 12), [borrower]), _why(_job("w", "a", 15), [borrower])
    lent = _why(_job("w", "a", 4), [_running(_job("b-run", "b", 16))])
    assert joined([short]) is short
    assert _same(joined([short, lent]), joined([shorter, lent]))
    assert not _same(joined([short, lent]), joined([lent, short]))
    assert not _same(joined([short, lent]), short)
    kept = short.wrapped(f"{short} (when it was tried)", "room-freed-later")
    assert _same(kept, shorter.wrapped(f"{shorter} (when it was tried)", "room-freed-later"))
    assert not _same(kept, short)
    launching = AutoscalerNote("launching", ("n-1",), 1, ready_at=91.0)
    later = AutoscalerNote("launching", ("n-1",), 1, ready_at=95.0)
    assert launching.gist == later.gist
    assert AutoscalerNote("launching", ("n-2",), 1, ready_at=91.0).gist != launching.gist
    noted = short.noted("a note", launching.gist)
    assert _same(noted, shorter.noted("another note", later.gist))
    assert not _same(noted, short)


def test_a_reason_given_without_a_key_is_the_same_only_as_the_same_words() -> None:
    """A reason read back from a store (or made by hand) has no key: its words are one."""
    read = PendingReason("waits: needs 2", "quota")
    assert read.gist == (WORDS, "waits: needs 2")
    assert new_in_substance(read, PendingReason("waits: needs 3", "quota"))


BUNDLED = Path(__file__).resolve().parents[1] / "src" / "fleetshare" / "scenarios"


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(BUNDLED.glob("*.yaml")) if "inference" not in p.stem],
    ids=lambda p: p.stem,
)
def test_every_reason_of_a_bundled_scenario_is_keyed_where_it_is_composed(path: Path) -> None:
    """No reason the engine gives falls back to its words as its key: each composer keys it."""
    runner = Runner(load_scenario(path))
    recorder = Recorder.attach(runner.loop)
    runner.run()
    said = [c.reason for c in recorder.changes if isinstance(c, PendingReasonChanged)]
    assert said
    assert [r for r in said if not _keyed(r.gist)] == []


def _keyed(gist: tuple[object, ...]) -> bool:
    """A composer's key: no part of it is a reason's words (:data:`WORDS`)."""
    if gist[:1] == (WORDS,):
        return False
    return all(_keyed(part) for part in gist if isinstance(part, tuple) and part)
