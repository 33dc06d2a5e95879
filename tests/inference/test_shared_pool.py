"""A node pool shared by a service and another team's training (issue 30 part 3): the
replicas reclaim the training's gangs at once, and the GPU-hours are booked against a
dedicated world (simulate/shared_pool.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetshare.scenario.loader import ScenarioError, load_scenario_data
from fleetshare.simulate.service_compare import summarize
from fleetshare.simulate.service_input import build_services
from fleetshare.simulate.services import ServiceRun, run_services
from fleetshare.simulate.shared_pool import ledger
from fleetshare.simulate.sla import training_in_headroom

from .test_service_run import _late, _scenario

TRAINING = {
    "pods": 2,
    "held_by": "training",
    "priority": "training",
    "team": "research",
    "gang_pods": 2,
    "checkpoint_seconds": 300,
}


def _shared(tmp_path: Path, **service: Any) -> dict[str, Any]:
    data = _scenario(tmp_path, **service)
    data["policy"]["teams"].append(
        {
            "name": "research",
            "quota": [],
            "borrow_limits": [{"resource": "nvidia.com/gpu", "absolute": 2}],
        }
    )
    return data


def _run(tmp_path: Path, option: str, **service: Any) -> ServiceRun:
    scenario = load_scenario_data(_shared(tmp_path, **service), tmp_path)
    return run_services(scenario, build_services(scenario, tmp_path), option)


def test_replicas_reclaim_another_teams_training_gang_by_hand(tmp_path: Path) -> None:
    """research borrows 2 GPUs for one gang of two replica-shaped pods (checkpoint every
    300 s) on the service's pool, whose nodes boot with the image. The gang is placed when
    its nodes are Ready (91 s); at 600 s the two new replicas reclaim it at once and serve
    after the model load alone (640 s). The gang ran 509 s and loses 509 mod 300 = 209 s on
    both GPUs, waits 91 s for two new nodes (691 s) and runs to the end (1,109 s): ran 2 x
    1,618 GPU-s, lost 2 x 209, delayed 2 x 91, useful 2 x 1,409. Paid: three nodes from 1 s
    and two from 601 s = 7,795 GPU-s; replicas held 1,709 + 2 x 1,200 = 4,109 GPU-s."""
    startup = {"image_pull_seconds": 100, "model_load_seconds": 40, "preloaded_pools": ["gpu"]}
    run = _run(tmp_path, "headroom", headroom=TRAINING, startup=startup)
    late = _late(run)
    assert len(late) == 2
    for wanted, placed, serving in late:
        assert placed == wanted == 600  # took the training's GPUs at once
        assert serving - placed == 40  # model load only: the node booted with the image
    records = run.result.records
    (gang,) = [r for n, r in records.items() if "-ph" in n]
    assert gang.workload.team == "research" and gang.workload.pod_count == 2
    assert [p["reason"] for p in gang.preemptions] == ["reclaim"]
    result = summarize(run, load_scenario_data(_shared(tmp_path), tmp_path))
    training = result.services["chat"]["training"]
    assert training["gpu_hours"] == round(2 * 1618 / 3600, 2)
    assert training["lost_gpu_hours"] == round(2 * 209 / 3600, 2)
    assert training["delayed_gpu_hours"] == round(2 * 91 / 3600, 2)
    assert training["useful_gpu_hours"] == round(2 * 1618 / 3600 - 2 * 209 / 3600, 2)
    # with a phase of its own, the gang's first end loses half an interval (150 s), expected
    assert training["lost_gpu_hours_independent_phases"] == round(2 * 150 / 3600, 2)
    assert result.cluster["gpu_hours"] == round(7795 / 3600, 2)
    assert result.cluster["inference_gpu_hours"] == round(4109 / 3600, 2)
    assert result.services["chat"]["headroom_gpu_hours"] == round(2 * 1618 / 3600, 2)


def test_the_ledger_against_a_dedicated_world_by_hand() -> None:
    """A 10-hour window; the shared pool paid 130 GPU-h, its training ran 95 and lost 5
    (useful 90), replicas held 30. The dedicated world: the service's pool paid 32 GPU-h and
    a training pool of 10 GPUs runs 100 GPU-h, all useful. Net inference = 130 - 90 = 40
    (+25 % on 32); the cluster 130 against 132 (-1.5 %). With the checkpoints' phases as
    placed (aligned) the training lost 2 more: useful 88, net 42."""
    useful = {"useful_gpu_hours": 88.0, "useful_gpu_hours_independent_phases": 90.0}
    shared = {
        "services": {"chat": {"training": useful}},
        "cluster": {"window_seconds": [0, 36_000], "gpu_hours": 130.0, "inference_gpu_hours": 30.0},
    }
    reactive = {"cluster": {"gpu_hours": 32.0}}
    book = ledger(shared, reactive, training_gpus=10)
    assert (book.cluster, book.training_useful, book.net_inference) == (130.0, 90.0, 40.0)
    assert book.replica_held == 30.0
    assert (book.dedicated_cluster, book.dedicated_training) == (132.0, 100.0)
    assert book.extra_net_inference_percent == pytest.approx(25.0)
    assert book.extra_cluster_percent == pytest.approx(100 * (130 / 132 - 1))
    aligned = ledger(shared, reactive, training_gpus=10, phases="aligned")
    assert (aligned.training_useful, aligned.net_inference) == (88.0, 42.0)


def test_training_team_and_gangs_are_checked(tmp_path: Path) -> None:
    bad = {"pods": 2, "team": "research"}  # placeholders: no team of their own
    with pytest.raises(ScenarioError, match="held_by: training"):
        load_scenario_data(_shared(tmp_path, headroom=bad), tmp_path)
    data = _shared(tmp_path, headroom={**TRAINING, "team": "nobody"})
    scenario = load_scenario_data(data, tmp_path)
    with pytest.raises(ScenarioError, match=r"headroom\.team: unknown team 'nobody'"):
        build_services(scenario, tmp_path)


def test_lost_work_with_independent_checkpoint_phases_by_hand() -> None:
    """Checkpoints every 1,000 s, one GPU a job, window [0, 10,000). Job 1 runs 0-2,500,
    is stopped, runs again 3,000-4,200, is stopped, and runs to the end. Aligned (from each
    placement): it loses 500 and 200. Independent: its first end loses 500 expected (half
    an interval, whatever its phase), its second 200 (it restarted from a checkpoint). Job
    2 runs 0-9,000 and is deleted: 0 aligned, 500 expected."""
    done = training_in_headroom(
        [([(0, 2500), (3000, 4200), (4300, 10_000)], None), ([(0, 9000)], 9000)],
        gpus=1,
        checkpoint=1000,
        start=0,
        end=10_000,
    )
    assert done.lost == pytest.approx((500 + 200 + 0) / 3600)
    assert done.lost_independent == pytest.approx((500 + 200 + 500) / 3600)


@pytest.mark.parametrize(
    ("save", "serving_at", "lost", "lost_independent"),
    [(20, 660, 0, 0), (90, 700, 209, 150)],
)
def test_a_training_job_saves_its_state_in_its_grace_period_by_hand(
    tmp_path: Path, save: float, serving_at: float, lost: float, lost_independent: float
) -> None:
    """The run above with the gang's pods given a 60 s termination grace period. A save of
    20 s fits: the gang releases its GPUs at 620, the replicas that reclaimed them at 600
    serve after the save and the model load (660), and the gang loses no work. A save of
    90 s does not fit: it is killed at the grace (660), the replicas serve at 700 and the
    gang loses its work since the last checkpoint as if stopped at once (209 s aligned,
    150 s with a phase of its own)."""
    startup = {"image_pull_seconds": 100, "model_load_seconds": 40, "preloaded_pools": ["gpu"]}
    headroom = {**TRAINING, "termination_grace_seconds": 60, "save_seconds": save}
    run = _run(tmp_path, "headroom", headroom=headroom, startup=startup)
    late = _late(run)
    assert late == [(600, 600, serving_at)] * 2
    result = summarize(run, load_scenario_data(_shared(tmp_path), tmp_path))
    training = result.services["chat"]["training"]
    assert training["gpu_hours"] == round(2 * 1618 / 3600, 2)
    assert training["lost_gpu_hours"] == round(2 * lost / 3600, 2)
    assert training["lost_gpu_hours_independent_phases"] == round(2 * lost_independent / 3600, 2)
    assert training["delayed_gpu_hours"] == round(2 * 91 / 3600, 2)
    # the replicas hold their GPUs from the reclaim, the save included
    assert result.cluster["inference_gpu_hours"] == round(4109 / 3600, 2)


def test_a_grace_period_is_for_training_only(tmp_path: Path) -> None:
    bad = {"pods": 2, "termination_grace_seconds": 30}
    with pytest.raises(ScenarioError, match="held_by: training"):
        load_scenario_data(_shared(tmp_path, headroom=bad), tmp_path)


def _stepped(tmp_path: Path, pool: dict[str, Any], cloud: dict[str, Any]) -> ServiceRun:
    """The run above with 10 -> 20 rps at 600 s (one replica reclaims the gang), the pool's
    disruption ``pool`` and ``cloud`` settings, to the traffic's end."""
    startup = {"image_pull_seconds": 100, "model_load_seconds": 40, "preloaded_pools": ["gpu"]}
    data = _shared(tmp_path, headroom=TRAINING, startup=startup)
    (tmp_path / "t.csv").write_text("time,rps\n0,10\n600,20\n")
    data["node_pools"][0].update(pool)
    data["cloud"].update(cloud)
    data["until"] = 1800  # the traffic's end: before the fix the runs went on churning
    scenario = load_scenario_data(data, tmp_path)
    return run_services(scenario, build_services(scenario, tmp_path), "headroom")


def _events(run: ServiceRun, kind: str) -> list[dict[str, Any]]:
    return [e for e in run.result.events if e["event"] == kind]


def test_consolidation_moves_no_replica_into_the_room_a_reclaimed_gang_waits_on(
    tmp_path: Path,
) -> None:
    """The pool's default consolidation (WhenEmptyOrUnderutilized, 30 s). At 600 s chat-r3
    reclaims the gang on nodes 2-3; the gang counts on node 3, free, and a new node (Ready at
    691). Node 3 is nominated for it, so consolidation does not move chat-r1 from node 1 onto
    it (Karpenter simulates the pending pods with the candidate's, ``SimulateScheduling``):
    the gang runs again at 691 on nodes 3-4. Before, chat-r1 moved onto node 3 at 615, the
    gang bought another node, chat-r3 moved onto node 4 at 735, and so on: the run stopped
    with chat-r3 restarted 501 times by consolidation and 970 nodes launched."""
    run = _stepped(tmp_path, {}, {})
    assert [e["node"] for e in _events(run, "launch")] == [
        f"gpu-g5.xlarge-{i}" for i in (1, 2, 3, 4)
    ]
    assert [p["workload"] for p in _events(run, "preempt")] == ["chat-ph2"]  # the reclaim alone
    gang = [e["at"] for e in _events(run, "admit") if e["workload"] == "chat-ph2"]
    assert gang == [91, 691]


def test_a_gang_keeps_its_ready_node_until_the_node_it_waits_for_is_up(tmp_path: Path) -> None:
    """Consolidation of empty nodes only (WhenEmpty, 30 s), nodes Ready 150 s after launch
    where the cloud's nominal latency is 90 s. The reclaimed gang counts on node 3 and on a
    node launched at 601, Ready at 751: node 3 stays nominated until then plus the 30 s, and
    the gang runs again at 751. Before, node 3 was held to 601 + 90 + 30 = 721 only, removed
    as empty then, the gang bought a node again at 752 whose wait ended the same way, and so
    on, one node every 150 s (11 launches to 1,800 s instead of 4)."""
    pool = {"disruption": {"consolidation_policy": "WhenEmpty", "consolidate_after_seconds": 30}}
    run = _stepped(tmp_path, pool, {"launch_latency_by_type": {"g5.xlarge": 150}})
    assert len(_events(run, "launch")) == 4
    terminated = [e for e in _events(run, "node") if e["action"] == "terminate"]
    assert all(e["at"] >= 1800 for e in terminated)
    gang = [e["at"] for e in _events(run, "admit") if e["workload"] == "chat-ph2"]
    assert gang == [151, 751]
