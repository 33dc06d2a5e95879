"""Where a shared pool's net extra GPU-hours go (simulate/idle_gpus.py,
simulate/shared_pool.py: net_extra): the parts add up to the net figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetshare.scenario.loader import load_scenario_data
from fleetshare.simulate.idle_gpus import NodeSpan, split_idle
from fleetshare.simulate.service_compare import summarize
from fleetshare.simulate.service_input import build_services
from fleetshare.simulate.services import run_services
from fleetshare.simulate.shared_pool import ledger, net_extra

from .test_shared_pool import TRAINING, _shared


def test_idle_gpus_split_by_why_by_hand() -> None:
    """One-GPU nodes, window [0, 1000). n1 (a replica's) and n2, n3 (a gang of two's) are
    launched at 0, Ready at 100. At 400 a second replica reclaims the gang on n2; the gang
    waits for n4 (launched at 400, Ready at 600) and runs on n3 and n4. A third replica on
    n5 (launched at 300, Ready at 400) is deleted at 700; n5 stays empty until 800.

    Launching: for replicas n1 100 + n5 100 = 200 GPU-s; for the headroom n2, n3 200 + n4
    200 = 400. Waiting for a gang: n3 from 400 to 600 = 200. Empty: n5 from 700 to 800 =
    100. Paid 4,100 - held 3,200 (replicas 900 + 600 + 300, the gang 2 x 300 + 2 x 400) =
    900 = 200 + 400 + 200 + 100."""
    nodes = [
        NodeSpan(0, 100, 1000, 1, for_headroom=False),
        NodeSpan(0, 100, 1000, 1, for_headroom=True),
        NodeSpan(0, 100, 1000, 1, for_headroom=True),
        NodeSpan(400, 600, 1000, 1, for_headroom=True),
        NodeSpan(300, 400, 800, 1, for_headroom=False),
    ]
    held = [(100, 1000, 1), (100, 400, 2), (400, 1000, 1), (600, 1000, 2), (400, 700, 1)]
    waiting = [(0, 100, 2), (400, 600, 2)]
    idle = split_idle(nodes, held, waiting, 0, 1000)
    assert idle.launching_for_replicas == pytest.approx(200 / 3600)
    assert idle.launching_for_headroom == pytest.approx(400 / 3600)
    assert idle.waiting_for_a_gang == pytest.approx(200 / 3600)
    assert idle.empty == pytest.approx(100 / 3600)
    assert idle.total == pytest.approx((4100 - 3200) / 3600)
    # a window cuts every part where it falls: [450, 750) sees 150 of launching for the
    # headroom, 150 of waiting, 50 of empty
    part = split_idle(nodes, held, waiting, 450, 750)
    assert (part.launching, part.waiting_for_a_gang, part.empty) == pytest.approx(
        (150 / 3600, 150 / 3600, 50 / 3600)
    )


def test_net_extra_parts_add_up_by_hand() -> None:
    """The shared pool paid 130 GPU-h: replicas held 30, training ran 94 (lost 4, useful
    90), idle 6 (launching 1 for replicas and 2 for the training, 1.5 waiting for a gang,
    1.5 empty). Reactive's pool paid 28: replicas 26.5, idle 1.5 (0.5 launching, 1.0
    empty). Net 130 - 90 = 40, 12 beyond reactive's 28 = replicas 3.5 + launching 2.5 +
    waiting 1.5 + empty 0.5 + lost 4."""
    split = {
        "launching_for_replicas": 1.0,
        "launching_for_headroom": 2.0,
        "waiting_for_a_gang": 1.5,
        "empty": 1.5,
    }
    training = {
        "gpu_hours": 94.0,
        "useful_gpu_hours": 89.0,
        "useful_gpu_hours_independent_phases": 90.0,
        "delayed_gpu_hours": 1.0,
    }
    shared = {
        "services": {"chat": {"training": training}},
        "cluster": {
            "window_seconds": [0, 36_000],
            "gpu_hours": 130.0,
            "inference_gpu_hours": 30.0,
            "idle_split_gpu_hours": split,
        },
    }
    base_split = {**{k: 0.0 for k in split}, "launching_for_replicas": 0.5, "empty": 1.0}
    reactive = {
        "cluster": {
            "gpu_hours": 28.0,
            "inference_gpu_hours": 26.5,
            "idle_split_gpu_hours": base_split,
        }
    }
    parts = net_extra(shared, reactive)
    assert (parts.replicas, parts.launching, parts.waiting_for_a_gang, parts.empty) == (
        3.5,
        2.5,
        1.5,
        0.5,
    )
    assert (parts.lost, parts.delayed) == (4.0, 1.0)
    book = ledger(shared, reactive, training_gpus=10)
    assert parts.total == pytest.approx(book.net_inference - 28.0) == pytest.approx(12.0)


def test_net_extra_of_a_run_by_hand(tmp_path: Path) -> None:
    """research's gang of two (checkpoint every 300 s) on the service's pool, whose nodes
    boot with the image (model load 40 s, nodes Ready 90 s after launch, removed 300 s
    after they are empty); the traffic steps from 10 to 20 rps at 600 s, so one replica
    reclaims the gang.

    Shared: three nodes launched at 1 s (for the first replica and the gang: counted as for
    replicas), Ready at 91; at 600 the second replica takes one of the gang's GPUs, the gang
    waits on its other node for one more (launched at 601, Ready at 691). Paid 3 x 1,799 +
    1,199 = 6,596 GPU-s; replicas held 1,709 + 1,200 = 2,909; training ran 2 x 509 + 2 x
    1,109 = 3,236 and lost 2 x 150 (its first end, a phase of its own); idle: launching 270
    for the first launch and 90 for the gang alone, 91 waiting for a gang. Reactive: paid
    1,799 + 1,199 = 2,998, held 1,709 + 1,109 = 2,818, launching 90 + 90.

    Net 6,596 - (3,236 - 300) = 3,660, 662 beyond reactive's 2,998 = replicas 91 +
    launching 180 + waiting 91 + lost 300."""
    startup = {"image_pull_seconds": 100, "model_load_seconds": 40, "preloaded_pools": ["gpu"]}
    (tmp_path / "t2.csv").write_text("time,rps\n0,10\n600,20\n")
    service = {
        "headroom": TRAINING,
        "startup": startup,
        "traffic": {"csv": {"csv": "t2.csv", "end_seconds": 1800}},
    }
    data = _shared(tmp_path, **service)
    data["node_pools"][0]["disruption"] = {
        "consolidation_policy": "WhenEmpty",
        "consolidate_after_seconds": 300,
    }
    scenario = load_scenario_data(data, tmp_path)
    services = build_services(scenario, tmp_path)
    out = {}
    for option in ("headroom", "reactive"):
        result = summarize(run_services(scenario, services, option), scenario)
        out[option] = {"services": result.services, "cluster": result.cluster}
    shared, reactive = out["headroom"], out["reactive"]
    hours = 1 / 3600
    assert shared["cluster"]["idle_split_gpu_hours"] == {
        "launching_for_replicas": round(270 * hours, 2),
        "launching_for_headroom": round(90 * hours, 2),
        "waiting_for_a_gang": round(91 * hours, 2),
        "empty": 0.0,
    }
    assert reactive["cluster"]["gpu_hours"] == round(2998 * hours, 2)
    assert reactive["cluster"]["inference_gpu_hours"] == round(2818 * hours, 2)
    parts = net_extra(shared, reactive)
    assert parts.replicas == pytest.approx(91 * hours, abs=0.01)
    assert parts.launching == pytest.approx(180 * hours, abs=0.01)
    assert parts.waiting_for_a_gang == pytest.approx(91 * hours, abs=0.01)
    assert (parts.empty, parts.lost) == (0.0, pytest.approx(300 * hours, abs=0.01))
    book = ledger(shared, reactive, training_gpus=2)
    assert book.net_inference == pytest.approx(3660 * hours, abs=0.01)
    assert parts.total == pytest.approx(book.net_inference - 2998 * hours, abs=0.02)
