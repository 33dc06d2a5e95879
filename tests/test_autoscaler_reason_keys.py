"""What the autoscaler says of pending work is keyed where it is composed, as the engine's
reasons are: why no node can be bought (the provisioner's reasons) and why quota would not
admit it (the demand count's). A note whose reason only quotes other amounts is the same
note (no extra event, no extra write on the operator); another subject or kind is new.
Reasons are made here by the real composers (``plan_nodes``, ``admissible_demand``)."""

from __future__ import annotations

from fleetshare.autoscaling.cloud import Offering
from fleetshare.autoscaling.nodepool import NodePool
from fleetshare.autoscaling.provisioner import PodShape, plan_nodes
from fleetshare.control.changes import AutoscalerNote
from fleetshare.control.state import ClusterState
from fleetshare.governance.demand import admissible_demand
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.model.catalog import load_catalog
from fleetshare.model.reason import Keyed
from fleetshare.model.resources import parse_resources
from fleetshare.model.workload import Workload
from tests.test_reason_gist import NODES, _engine, _job, _running

CATALOG = load_catalog()


def _left_out(
    count: int,
    *,
    pool: str = "p",
    limits: dict[str, int] | None = None,
    itype: str = "c6i.xlarge",
    cpu: int = 1,
) -> Keyed:
    """Why the provisioner leaves out some of ``count`` pods of ``cpu`` CPUs on pool ``pool``
    (only ``itype``; at most one node by default)."""
    shape = PodShape(tuple(sorted(parse_resources({"cpu": cpu, "memory": "1Gi"}).items())), count)
    nodepool = NodePool(name=pool, instance_types=[itype], limits=limits or {"nodes": 1})
    offering = Offering(itype, "z1", "on-demand", CATALOG.get(itype).price_per_hour or 1.0)
    plan = plan_nodes([shape], [nodepool], CATALOG, [offering])
    return plan.unplaceable[0]


def _note(reason: Keyed) -> AutoscalerNote:
    return AutoscalerNote("cannot-add", reason=reason)


def test_a_provisioner_reason_differing_only_in_amounts_is_the_same_note() -> None:
    """Five or six pods and one node under the pool's limit: other counts, the same reason."""
    five, six = _left_out(5), _left_out(6)
    assert five.startswith("2 of 5 pods not planned: node pool 'p' limit nodes")
    assert six.startswith("3 of 6 pods not planned: node pool 'p' limit nodes")
    assert five.gist == six.gist and _note(five).gist == _note(six).gist
    by_cpu = {"cpu": 6}  # one c6i.xlarge under it, usage moving under the limit
    assert _left_out(5, limits=by_cpu) != _left_out(9, limits=by_cpu)
    assert _left_out(5, limits=by_cpu).gist == _left_out(9, limits=by_cpu).gist


def test_a_provisioner_reason_of_another_subject_or_kind_is_a_new_note() -> None:
    """Another pool, another limit (resource), another instance type, or another kind (no
    type large enough rather than a limit blocking): a new note."""
    said = _left_out(5)
    others = {
        "pool": _left_out(5, pool="q"),
        "limit": _left_out(5, limits={"cpu": 6}),
        "resource": _left_out(5, limits={"memory": "10Gi"}),
        "instance type": _left_out(5, itype="m6i.xlarge"),
        "kind": _left_out(5, cpu=64),
    }
    assert "large enough" in others["kind"]
    for subject, other in others.items():
        assert other.gist != said.gist, subject
        assert _note(other).gist != _note(said).gist, subject
    assert others["limit"].gist != others["resource"].gist


def _quota_reason(wl: Workload, running: list[Running]) -> Keyed:
    """Why the demand count leaves ``wl`` out beside ``running``."""
    demand, blocked = admissible_demand(_engine(), Snapshot(0.0, NODES, running, [wl]))
    assert not demand
    return blocked[wl.name]


def test_a_demand_reason_is_keyed_as_the_quota_composed_it() -> None:
    """Short of quota to borrow for 12 or 15 CPUs on x: the same; on y, of memory, or
    another team's: new."""
    borrower = [_running(_job("b-run", "b", 14))]
    twelve = _quota_reason(_job("w", "a", 12), borrower)
    fifteen = _quota_reason(_job("w", "a", 15), borrower)
    assert twelve != fifteen and twelve.gist == fifteen.gist
    on_y = _quota_reason(_job("w", "a", 12, pool="y"), [_running(_job("b", "b", 14, pool="y"))])
    memory = _quota_reason(_job("w", "a", 1, memory=40), [_running(_job("b", "b", 1, memory=56))])
    team = _quota_reason(_job("w", "b", 12), [_running(_job("a-run", "a", 14))])
    for other in (on_y, memory, team):
        assert other.gist != twelve.gist
    note = AutoscalerNote("quota-blocked", reason=twelve)
    assert note.gist == AutoscalerNote("quota-blocked", reason=fifteen).gist


def test_a_note_with_other_amounts_is_not_said_again() -> None:
    """The shared rule a backend writes notes by (``ClusterState.noted``): the note shown
    takes the new amounts, but only a note new in substance is written again."""
    state = ClusterState(lambda change: None)
    wl = _job("w", "a", 12)
    state.pending.put(wl)
    borrower = [_running(_job("b-run", "b", 14))]
    state.report_pending(_engine().cycle(Snapshot(0.0, NODES, borrower, [wl])), 0.0)
    assert state.noted("w", _note(_left_out(5)))
    assert not state.noted("w", _note(_left_out(6)))
    assert "3 of 6 pods not planned" in state.waiting["w"].reason
    assert state.noted("w", _note(_left_out(6, pool="q")))
