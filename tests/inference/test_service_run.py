"""Services in the simulator: replicas through governance, startup times, placeholders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetshare.inference.serving import serve
from fleetshare.scenario.loader import ScenarioError, load_scenario_data
from fleetshare.simulate.service_compare import summarize
from fleetshare.simulate.service_input import build_services
from fleetshare.simulate.services import ServiceRun, run_services


def _scenario(tmp_path: Path, **service: Any) -> dict[str, Any]:
    (tmp_path / "t.csv").write_text("time,rps\n0,10\n600,30\n")
    svc = {
        "name": "chat",
        "team": "product",
        "priority": "inference",
        "replica": {"requests": {"nvidia.com/gpu": 1, "cpu": 3, "memory": "12Gi"}},
        "capacity_rps": 10,
        "scaler": {"min_replicas": 1, "triggers": [{"metric": "rps", "target": 10}]},
        "startup": {"image_pull_seconds": 100, "model_load_seconds": 40},
        "traffic": {"csv": {"csv": "t.csv", "end_seconds": 1800}},
        **service,
    }
    return {
        "cluster": {"nodes": []},
        "policy": {
            "cluster": {
                "priority_classes": [
                    {"name": "inference", "weight": 90},
                    {"name": "training", "weight": 70},
                    {"name": "placeholder", "weight": 0},
                ]
            },
            "teams": [
                {
                    "name": "product",
                    "quota": [{"resources": {"nvidia.com/gpu": 16, "cpu": 64, "memory": "256Gi"}}],
                }
            ],
        },
        "node_pools": [{"name": "gpu", "families": ["g5"], "instance_types": ["g5.xlarge"]}],
        "cloud": {"seed": 1, "launch_latency_seconds": 90},
        "services": [svc],
    }


def _run(tmp_path: Path, option: str = "all", **service: Any) -> ServiceRun:
    scenario = load_scenario_data(_scenario(tmp_path, **service), tmp_path)
    return run_services(scenario, build_services(scenario, tmp_path), option)


def _late(run: ServiceRun) -> list[tuple[float, float, float]]:
    """(wanted, placed, serving) of the replicas wanted at the demand step."""
    return [
        s
        for p in run.services[0].pods.values()
        if not p.placeholder
        for s in p.starts
        if s[0] >= 600
    ]


def test_reactive_replica_waits_for_node_launch_pull_and_load(tmp_path: Path) -> None:
    run = _run(tmp_path, "reactive")
    late = _late(run)
    assert len(late) == 2  # 10 -> 30 rps at a target of 10: 1 -> 3 replicas
    for wanted, placed, serving in late:
        assert wanted == 600  # the scaler's tick at the step
        assert placed - wanted >= 90  # a node had to be launched
        assert serving - placed == 140  # image pull + model load on a new node


def test_a_preloaded_pool_skips_the_pull_on_a_new_node(tmp_path: Path) -> None:
    startup = {"image_pull_seconds": 100, "model_load_seconds": 40, "preloaded_pools": ["gpu"]}
    late = _late(_run(tmp_path, "reactive", startup=startup))
    assert len(late) == 2
    for wanted, placed, serving in late:
        assert placed - wanted >= 90  # the node launch is still there
        assert serving - placed == 40  # the model load only: the image came with the node


def test_placeholders_give_way_and_their_node_has_the_image(tmp_path: Path) -> None:
    run = _run(tmp_path, "headroom", headroom={"pods": 2})
    late = _late(run)
    assert len(late) == 2
    for wanted, placed, serving in late:
        assert placed == wanted == 600  # preempted a placeholder at once
        assert serving - placed == 40  # the placeholder pulled the image: model load only
    records = run.result.records
    preempted = [n for n, r in records.items() if r.preemptions and "-ph" in n]
    assert len(preempted) == 2
    assert all(records[n].preemptions[0]["reason"] == "priority" for n in preempted)


def test_scale_down_waits_for_the_stabilisation_window(tmp_path: Path) -> None:
    (tmp_path / "down.csv").write_text("time,rps\n0,30\n300,5\n")
    run = _run(
        tmp_path,
        "reactive",
        traffic={"csv": {"csv": "down.csv", "end_seconds": 1800}},
    )
    pods = run.services[0].pods.values()
    deleted = sorted(p.deleted_at for p in pods if p.deleted_at is not None and p.deleted_at < 1800)
    # the 300 s scale-down window: the last high proposal (t=285) counts until t=585
    assert deleted == [585.0, 585.0]
    assert len([p for p in pods if p.deleted_at is None or p.deleted_at >= 1800]) == 1


def test_inference_replicas_preempt_training_of_their_team(tmp_path: Path) -> None:
    (tmp_path / "later.csv").write_text("time,rps\n0,0\n600,10\n")
    data = _scenario(tmp_path, traffic={"csv": {"csv": "later.csv", "end_seconds": 1200}})
    data["services"][0]["scaler"]["min_replicas"] = 0
    data["cluster"] = {"nodes": [{"name": "n", "instance_type": "g5.xlarge"}]}
    data["node_pools"] = []
    data["workloads"] = [
        {
            "name": "train",
            "team": "product",
            "priority": "training",
            "at": 0,
            "requests": {"nvidia.com/gpu": 1},
        }
    ]
    scenario = load_scenario_data(data, tmp_path)
    run = run_services(scenario, build_services(scenario, tmp_path), "reactive")
    (preemption,) = run.result.records["train"].preemptions
    assert (preemption["at"], preemption["by"], preemption["reason"]) == (
        600,
        "chat-r1",
        "priority",
    )


def test_bad_service_fields_are_named(tmp_path: Path) -> None:
    data = _scenario(tmp_path, headroom={"pods": 1, "priority": "training"})
    data["policy"]["cluster"]["priority_classes"][1]["weight"] = 95
    scenario = load_scenario_data(data, tmp_path)
    with pytest.raises(ScenarioError, match=r"services\[0\]\(chat\)\.headroom\.priority"):
        build_services(scenario, tmp_path)
    data = _scenario(tmp_path, team="nobody")
    scenario = load_scenario_data(data, tmp_path)
    with pytest.raises(ScenarioError, match=r"services\[0\]\(chat\)\.team: unknown team"):
        build_services(scenario, tmp_path)
    data = _scenario(tmp_path, traffic={"csv": {"csv": "missing.csv"}})
    scenario = load_scenario_data(data, tmp_path)
    with pytest.raises(ScenarioError, match=r"services\[0\]\(chat\)\.traffic"):
        build_services(scenario, tmp_path)
    data = _scenario(tmp_path, startup={"preloaded_pools": ["gpu", "cpu"]})
    scenario = load_scenario_data(data, tmp_path)
    with pytest.raises(
        ScenarioError, match=r"services\[0\]\(chat\)\.startup\.preloaded_pools\[1\]: no node pool"
    ):
        build_services(scenario, tmp_path)


def test_option_metrics_of_a_reactive_run_by_hand(tmp_path: Path) -> None:
    """docs/inference.md's metrics on the reactive run, by hand. 10 rps until 600 s, then 30,
    to 1800 s; a replica serves 10 rps on one g5.xlarge ($1.006/h). Each wanted replica (one
    at 0, two at 600) gets a node launched 1 s later (the autoscaler's batching), Ready 90 s
    after, then pulls and loads for 140 s: serving at 231 s and 831 s. So needed (1, then 3)
    is short for 231 s twice: 7.7 capacity-short minutes; requests in capacity short 10 x 231 + 30 x
    231 = 9,240; over capacity 10 x 231 + 20 x 231 = 6,930; three demand steps (levels 1, 2,
    3), each 231 s to capacity. Paid: 1 GPU x 1,799 s + 2 x 1,199 s = 4,197 GPU-s; needed:
    600 + 3 x 1,200 = 4,200 GPU-s (1.1667 h, the perfect-foresight cost 1.1667 x $1.006);
    the bill 4,197 s x $1.006/h."""
    run = _run(tmp_path, "reactive")
    result = summarize(run, load_scenario_data(_scenario(tmp_path), tmp_path))
    chat, cluster = result.services["chat"], result.cluster
    assert chat["capacity_short_minutes"] == pytest.approx(2 * 231 / 60, abs=0.01)
    assert chat["requests"] == 10 * 600 + 30 * 1200
    assert chat["requests_in_capacity_short"] == 10 * 231 + 30 * 231
    assert chat["requests_over_capacity"] == 10 * 231 + 20 * 231
    assert (chat["demand_steps"], chat["demand_steps_met_at_once"]) == (3, 0)
    assert chat["time_to_capacity_seconds"]["p99"] == 231
    assert (chat["replicas_created"], chat["replicas_deleted"]) == (3, 0)
    assert chat["placeholders_created"] == 0 and chat["headroom_gpu_hours"] == 0
    assert chat["needed_gpu_hours"] == round(4200 / 3600, 2)
    assert cluster["gpu_hours"] == round(4197 / 3600, 2)
    assert cluster["idle_gpu_hours"] == round(4197 / 3600 - 4200 / 3600, 2)
    assert cluster["cost"] == round(4197 / 3600 * 1.006, 2)
    assert cluster["perfect_foresight_cost"] == round(4200 / 3600 * 1.006, 2)
    assert (cluster["nodes_launched"], cluster["nodes_terminated"]) == (3, 0)


def test_startup_profile_takes_node_pull_and_load_from_the_table(tmp_path: Path) -> None:
    # g5: node 150 s; pull 180 s; 8B from object storage 150 s (inference/startup.py)
    startup = {"profile": {"model_size": "8b", "image": "pull", "weights": "object-storage"}}
    late = _late(_run(tmp_path, "reactive", startup=startup))
    assert len(late) == 2
    for wanted, placed, serving in late:
        assert placed - wanted >= 150  # the table's g5 launch, not the cloud's 90 s
        assert serving - placed == 180 + 150


def test_requests_from_a_trace_file_served_on_the_run_by_hand(tmp_path: Path) -> None:
    """Three requests of an Azure-format trace at 0, 100 and 300 s (1,000 prompt tokens, 11
    output tokens each) on the run above: the first replica serves from 231 s (node 1 s +
    90 s, pull and load 140 s). Prefill 1,000 tokens/s (1 s a prompt), 0.1 s an output
    token. r1 waits 231 s: TTFT 232, last token 233; r2 (at 100) waits for the prefill
    engine until 232: TTFT 133; r3 (at 300) starts at once: TTFT 1. r1 and r2 arrived while
    no replica served (cold start, waits 231 and 132 s). SLO p99 TTFT <= 2 s by minute:
    [0, 60) and [60, 120) violate; [300, 301) does not; 2 of 3 requests missed it."""
    (tmp_path / "trace.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.0000000,1000,11\n"
        "2023-11-16 18:01:40.0000000,1000,11\n"
        "2023-11-16 18:05:00.0000000,1000,11\n"
    )
    run = _run(
        tmp_path,
        "reactive",
        traffic={"requests": {"file": "trace.csv"}},
        serving={
            "prefill_tokens_per_second": 1000,
            "decode_seconds_per_token": 0.1,
            "max_sequences": 4,
        },
        slo={"ttft_seconds": 2},
    )
    result = summarize(run, load_scenario_data(_scenario(tmp_path), tmp_path))
    slo = result.services["chat"]["slo"]
    assert slo["requests"] == 3 and slo["requests_missed_slo"] == 2
    assert slo["ttft_seconds"]["max"] == 232.0 and slo["ttft_seconds"]["p50"] == 133.0
    assert slo["tpot_seconds"]["max"] == pytest.approx(0.1)
    assert slo["slo_violation_minutes"] == 2.0
    assert slo["cold_start_requests"] == 2
    assert slo["cold_start_wait_seconds"]["max"] == 231.0
    assert slo["cold_start_wait_seconds"]["p50"] == 132.0


def test_training_holding_the_headroom_by_hand(tmp_path: Path) -> None:
    """Two training pods hold the headroom (checkpoint every 300 s). They are placed when
    their nodes are Ready (91 s); at 600 s the two new replicas preempt them at once, but a
    training node has not pulled the service's image: pull + load 140 s, serving at 740 (a
    placeholder's node would serve at 640). Each training pod ran 509 s and loses 509 mod
    300 = 209 s of work, waits 91 s for a new node (691 s) and runs to the end (1,109 s):
    ran 2 x 1,618 GPU-s, lost 2 x 209, delayed 2 x 91. Paid: three nodes from 1 s and two
    from 601 s = 3 x 1,799 + 2 x 1,199 = 7,795 GPU-s; replicas held 1,709 + 2 x 1,200 =
    4,109; spare 3,686 GPU-s, of which training ran 3,236: 87.79 %."""
    headroom = {"pods": 2, "held_by": "training", "checkpoint_seconds": 300}
    run = _run(tmp_path, "headroom", headroom=headroom)
    late = _late(run)
    assert len(late) == 2
    for wanted, placed, serving in late:
        assert placed == wanted == 600  # preempted the training at once
        assert serving - placed == 140  # but pulls the image on the training's node
    result = summarize(run, load_scenario_data(_scenario(tmp_path), tmp_path))
    training = result.services["chat"]["training"]
    assert training["gpu_hours"] == round(2 * 1618 / 3600, 2)
    assert training["lost_gpu_hours"] == round(2 * 209 / 3600, 2)
    assert training["delayed_gpu_hours"] == round(2 * 91 / 3600, 2)
    assert result.cluster["spare_gpu_hours"] == round(7795 / 3600 - 4109 / 3600, 2)
    assert result.cluster["training_share_of_spare"] == round(3236 / 3686, 4)


def _burst(tmp_path: Path) -> None:
    """A trace of 30 requests in the first second (1,000 prompt tokens, 11 output tokens
    each) and one at 600 s."""
    rows = [f"2023-11-16 18:00:00.{i:02d}00000,1000,11" for i in range(30)]
    rows.append("2023-11-16 18:10:00.0000000,1000,11")
    (tmp_path / "burst.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n"
    )


SERVING = {"prefill_tokens_per_second": 1000, "decode_seconds_per_token": 0.1, "max_sequences": 4}


def test_a_queue_trigger_reads_the_serving_engines_waiting_requests(tmp_path: Path) -> None:
    """The burst's rate is over by the second tick (the scaler reads the true rate, 0 at 15
    s), but its 30 requests wait for the first replica (serving at 231 s). At 0 the service
    activates: 1 replica. At 15 the queue trigger (target 5 a replica) reads 30 waiting:
    ratio 30 / (5 x 1) = 6, proposal ceil(30 / 5) = 6 (the rps trigger proposes 0; the
    largest wins), limited by the scale-up policies to max(1 + 4 pods, 2 x 1) = 5. At 30:
    ratio 30 / 25 = 1.2, above the tolerance: 6. With the rps trigger alone it stays at 1.
    The run's serving model agrees with the post-run one on the run's replicas."""
    _burst(tmp_path)
    fields: dict[str, Any] = {
        "traffic": {"requests": {"file": "burst.csv"}},
        "serving": SERVING,
        "slo": {"ttft_seconds": 2},
    }
    triggers = [{"metric": "rps", "target": 10}, {"metric": "queue", "target": 5}]
    run = _run(tmp_path, "reactive", scaler={"min_replicas": 1, "triggers": triggers}, **fields)
    state = run.services[0]
    wanted = {d["at"]: d["replicas"] for d in state.decisions}
    assert (wanted[0.0], wanted[15.0], wanted[30.0], wanted[45.0]) == (1, 5, 6, 6)
    alone = _run(tmp_path, "reactive", **fields).services[0]
    assert {d["at"]: d["replicas"] for d in alone.decisions}[30.0] == 1
    assert state.server is not None
    service = state.service
    assert service.requests is not None and service.serving is not None
    intervals = [iv for p in state.pods.values() if not p.placeholder for iv in p.serving]
    state.server.know(intervals, [], run.end + 1)
    state.server.advance(run.end)
    online = state.server.served(run.end)
    post = serve(service.requests, intervals, service.serving, run.end)
    assert np.array_equal(online.start, post.start, equal_nan=True)
    assert np.array_equal(online.last, post.last, equal_nan=True)


def test_a_running_trigger_needs_the_serving_model(tmp_path: Path) -> None:
    triggers = [{"metric": "rps", "target": 10}, {"metric": "running", "target": 24}]
    data = _scenario(tmp_path, scaler={"min_replicas": 1, "triggers": triggers})
    scenario = load_scenario_data(data, tmp_path)
    with pytest.raises(
        ScenarioError,
        match=r"services\[0\]\(chat\)\.scaler\.triggers\[1\]\.metric: running .* give serving",
    ):
        build_services(scenario, tmp_path)
