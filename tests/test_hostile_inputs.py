"""Bad and hostile input gets one clear line and exit code 2, never a traceback or a hang.

Each test is a class of input that once escaped as a Python traceback, hung, or was accepted
and silently wrong (the hostile-input issue); it runs the real command line in-process.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetshare import cli
from fleetshare.cli import app
from fleetshare.traces.common import BUNDLED_DATA, DATA_ENV

ROOT = Path(__file__).resolve().parents[1]
POOLS = ROOT / "examples" / "pools.yaml"
POLICY = "teams:\n  - name: a\n    quota: [{resources: {nvidia.com/gpu: 4}}]\n"
SCENARIO = (
    "cluster: {nodes: [{name: n, allocatable: {nvidia.com/gpu: 8, cpu: 8}}]}\n"
    "policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 4}}]}]}\n"
    "workloads: [{name: w, team: a, requests: {nvidia.com/gpu: %s}}]\n"
)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.output


def one_error_line(output: str, *words: str) -> None:
    """An ``error:`` line that says what and why (a file's bad fields follow, one a line),
    never wrapped at a width: each expected phrase is whole on one line, as a script greps it."""
    lines = output.strip("\n").splitlines()
    assert lines[0].startswith("error: "), output
    assert "Traceback" not in output
    for word in words:
        assert any(word in line for line in lines), output


def ends_with_error_line(output: str, *words: str) -> None:
    """Progress lines may come first (``simulate``); then one ``error:`` line, the last."""
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(starts) == 1, output
    one_error_line("\n".join(lines[starts[0] :]), *words)


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


@pytest.mark.parametrize(
    "command", ["validate", "import-hyperpod", "plan-pending", "plan-pools", "plan-nodes"]
)
def test_files_that_are_not_utf8(tmp_path: Path, command: str) -> None:
    bad = write(tmp_path, "bad.yaml", "teams: [{name: caf\xe9}]".encode("latin-1"))
    pending = ROOT / "examples" / "pending.yaml"
    args = {
        "validate": ["policy", "validate", str(bad)],
        "import-hyperpod": ["policy", "import", "hyperpod", str(bad)],
        "plan-pending": ["plan", "--pools", str(POOLS), "--pending", str(bad)],
        "plan-pools": ["plan", "--pools", str(bad), "--pending", str(bad)],
        "plan-nodes": [
            "plan",
            "--pools",
            str(POOLS),
            "--pending",
            str(pending),
            "--nodes",
            str(bad),
        ],
    }[command]
    code, out = run(*args)
    assert code == 2
    one_error_line(out, "bad.yaml", "is not UTF-8 text")


def test_devices_pipes_and_directories_are_refused_before_reading(tmp_path: Path) -> None:
    code, out = run("policy", "validate", "/dev/zero")
    assert code == 2
    one_error_line(out, "/dev/zero", "not a regular file")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # no writer: opening it would block for ever
    code, out = run("scenario", "run", str(fifo))
    assert code == 2
    one_error_line(out, "pipe.yaml", "not a regular file")
    code, out = run("policy", "validate", str(tmp_path))
    assert code == 2
    one_error_line(out, "is a directory")


def test_deep_nesting(tmp_path: Path) -> None:
    deep_yaml = write(tmp_path, "deep.yaml", "teams: " + "[" * 5000 + "]" * 5000)
    code, out = run("policy", "validate", str(deep_yaml))
    assert code == 2
    one_error_line(out, "nested more than")
    deep_json = write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    code, out = run("policy", "import", "hyperpod", str(deep_json))
    assert code == 2
    one_error_line(out, "nested more than")


def test_the_linear_yaml_scanner_reads_as_pyyamls() -> None:
    """fleetshare's loader keeps PyYAML's possible simple keys in linear time (deep flow
    nesting took seconds): on texts that exercise them (keys on one line or not, longer than
    1,024 characters, required and not, flow nesting deep and shallow) it gives PyYAML's
    result or PyYAML's error, word for word."""
    import yaml

    from fleetshare import inputs

    class Plain(yaml.SafeLoader):
        pass

    Plain.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, inputs._mapping)

    def read(text: str, loader: type[yaml.SafeLoader]) -> tuple[str, str]:
        try:
            return "ok", repr(list(yaml.load_all(text, Loader=loader)))
        except RecursionError:
            return "recursion", ""
        except yaml.YAMLError as exc:
            return type(exc).__name__, str(exc)

    texts = [
        "a: 1\nb: [c, {d: e}]\n", "? a\n: b\n", "[a, b]: c\n", "x" * 2000 + ": 1\n",
        "'" + "x" * 1100 + "': 1\n", "key\n: value\n", "- a\n- b: c\n  d: e\n",
        "a:\n  b\n  c: d\n", "{a: b\nc: d}\n", "a: [b, c: d]\n", "a: b: c\n",
        "[" * 300 + "]" * 300, "{" * 200 + "}" * 200, "a: " + "[" * 1100, "[" * 5000 + "]" * 5000,
        "a: [" + "x" * 1100 + ": 1]\n", "- [a, b]: c\n  [d]: e\n",
    ]  # fmt: skip
    for text in texts:
        assert read(text, inputs._Loader) == read(text, Plain), text[:80]


def test_a_billion_laughs_is_refused_at_once(tmp_path: Path) -> None:
    """Aliases of aliases: nine levels of nine would be 387 million values to walk."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    laughs = write(tmp_path, "laughs.yaml", "\n".join(lines) + "\nteams: []\n")
    started = time.monotonic()
    code, out = run("policy", "validate", str(laughs))
    assert code == 2 and time.monotonic() - started < 10
    one_error_line(out, "aliases expand to more values than the text holds")
    shared = write(tmp_path, "shared.yaml", "x: &q {cpu: 1}\nteams: [{name: a, labels: *q}]\n")
    _, out = run("policy", "validate", str(shared))
    assert "aliases expand" not in out


def test_a_duplicate_key_is_an_error_not_a_silent_override(tmp_path: Path) -> None:
    dup = write(tmp_path, "dup.yaml", POLICY + "teams: []\n")
    code, out = run("policy", "validate", str(dup))
    assert code == 2
    one_error_line(out, "dup.yaml", "duplicate key 'teams'", "line 4")


def test_non_finite_numbers(tmp_path: Path) -> None:
    inf = write(tmp_path, "inf.yaml", SCENARIO % ".inf")
    code, out = run("scenario", "run", str(inf))
    assert code == 2
    one_error_line(out, "is not a finite number")
    nan = write(tmp_path, "nan.json", '{"ComputeQuotas": [{"Name": NaN}]}')
    code, out = run("policy", "import", "hyperpod", str(nan))
    assert code == 2
    one_error_line(out, "NaN is not a finite number")


def test_a_negative_request_cannot_give_a_team_quota(tmp_path: Path) -> None:
    negative = write(tmp_path, "neg.yaml", SCENARIO % "-4")
    code, out = run("scenario", "run", str(negative))
    assert code == 2
    one_error_line(out, "workloads[0](w).requests: nvidia.com/gpu", "must not be negative")
    pending = write(tmp_path, "pending.yaml", "workloads: [{name: w, requests: {cpu: -2}}]\n")
    code, out = run("plan", "--pools", str(POOLS), "--pending", str(pending))
    assert code == 2
    one_error_line(out, "must not be negative")


def test_absurdly_large_requests_are_refused(tmp_path: Path) -> None:
    pending = write(tmp_path, "pending.yaml", "workloads: [{name: w, requests: {cpu: 1e30}}]\n")
    code, out = run("plan", "--pools", str(POOLS), "--pending", str(pending))
    assert code == 2
    one_error_line(out, "requests: cpu", "quantity too large")


def test_a_corrupt_gzip_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    shutil.copytree(BUNDLED_DATA / "philly", data / "philly")
    target = data / "philly" / "philly_node_sequence.csv.gz"
    target.write_bytes(gzip.compress(b"time,active,total\n")[:20])  # truncated
    monkeypatch.setenv(DATA_ENV, str(data))
    code, out = run("simulate", "--trace", "philly", "--days", "0.1", "-p", "static")
    assert code == 2
    one_error_line(out, "philly_node_sequence.csv.gz", "not a readable gzip file")


def test_an_unexpected_failure_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario = write(tmp_path, "ok.yaml", SCENARIO % "1")

    def boom(*_: object) -> None:
        raise RuntimeError("something nobody expected\nsecond line")

    monkeypatch.setattr(cli, "_run_with_progress", boom)
    with pytest.raises(SystemExit) as exit_info:
        app(args=["scenario", "run", str(scenario)], prog_name="fleetshare")
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "RuntimeError: something nobody expected" in err and "second line" not in err
    assert "--debug" in err and "Traceback" not in err
    monkeypatch.setattr(cli.sys, "argv", ["fleetshare", "--debug"])
    with pytest.raises(RuntimeError):  # --debug lets it through, traceback and all
        app(args=["scenario", "run", str(scenario)], prog_name="fleetshare")


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--days", "nan", "option days: Input should be a finite number"),
        ("--days", "inf", "option days: Input should be a finite number"),
        ("--start-day", "-1", "start_day must be a finite number >= 0"),
    ],
)
def test_simulate_options_out_of_range(option: str, value: str, words: str) -> None:
    code, out = run("simulate", "--trace", "helios", option, value, "-p", "static")
    assert code == 2
    one_error_line(out, words)


def test_a_worker_count_below_one_is_refused() -> None:
    for jobs in ("0", "-3"):
        code, out = run("simulate", "--trace", "helios", "--jobs", jobs, "-p", "static")
        assert code == 2 and "--jobs" in out and "Traceback" not in out


@pytest.mark.parametrize(
    ("team", "words"),
    [
        ("fair_share_weight: .inf", "is not a finite number"),  # refused when read
        ("quota: [{instance_type: ml.g5.8xlarge, count: true}]", "count: Input should be a valid"),
        (
            "quota: [{instance_type: ml.p4d.24xlarge, accelerator_partition: "
            "{type: mig-9g.99gb, count: 2}}]",
            "has no MIG profile mig-9g.99gb",
        ),
        ("quota: [{resources: {nvidia.com/gpu: -4}}]", "must not be negative"),
        (
            "quota: [{resources: {nvidia.com/gpu: 4}}]\n    "
            "borrow_limits: [{resource: nvidia.com/gpu, absolute: -1}]",
            "must not be negative",
        ),
    ],
)
def test_policies_silently_wrong_before(tmp_path: Path, team: str, words: str) -> None:
    policy = write(tmp_path, "policy.yaml", f"teams:\n  - name: a\n    {team}\n")
    code, out = run("policy", "validate", str(policy))
    assert code == 2
    one_error_line(out, words)


def _helios_copy(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(BUNDLED_DATA / "helios-earth", data / "helios-earth")
    return data


def _rewrite_vc(path: Path, keep: int, swap: bool = False) -> None:
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    body = lines[1 : keep + 1]
    if swap:
        body[1], body[2] = body[2], body[1]
    path.write_bytes(gzip.compress(("\n".join([lines[0], *body]) + "\n").encode()))


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("header-only", "has a header but no data rows"),
        ("out-of-order", "is not after the row before"),
        ("negative-quota", "'-8' is not a finite number from 0"),
    ],
)
def test_helios_files_are_checked_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, words: str
) -> None:
    data = _helios_copy(tmp_path)
    folder = data / "helios-earth"
    vc = sorted(folder.glob("vc*.csv.gz"))[0]
    if damage == "header-only":
        _rewrite_vc(vc, 0)
    elif damage == "out-of-order":
        _rewrite_vc(vc, 10, swap=True)
    else:
        quota = folder / "vc_gpu_quota_daily.csv"
        rows = quota.read_text().splitlines()
        cells = rows[1].split(",")
        cells[1] = "-8"
        quota.write_text("\n".join([rows[0], ",".join(cells), *rows[2:]]) + "\n")
    monkeypatch.setenv(DATA_ENV, str(data))
    code, out = run("simulate", "--trace", "helios", "--days", "0.1", "-p", "static")
    assert code == 2
    one_error_line(out, words)


def test_philly_active_above_total(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    shutil.copytree(BUNDLED_DATA / "philly", data / "philly")
    path = data / "philly" / "philly_node_sequence.csv.gz"
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    stamp = lines[3].split(",")[0]
    lines[3] = f"{stamp},500,420"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    monkeypatch.setenv(DATA_ENV, str(data))
    code, out = run("simulate", "--trace", "philly", "--days", "0.1", "-p", "static")
    assert code == 2
    one_error_line(out, "row 4: 500 active nodes of 420 in all")


def test_a_burst_onto_many_launching_nodes_stays_fast() -> None:
    """A 0.05-day DLRM slice under fair-share-autoscale did not end: 7,280 jobs at t=0, 1,055
    nodes launched in one plan (each node carrying the plan's workload list). Per pending job
    the autoscaler's note scanned every launching node's list (pending × nodes × plan size),
    its free room fitted each job once per node it waited for, single-node consolidation
    recounted every pod per candidate, and the runner logged every job carrying a note as
    pending again at every instant. It was slow, not stuck: each fixed, the slice runs."""
    import time

    from fleetshare.scenario.loader import load_scenario_data
    from fleetshare.scenario.runner import run_scenario

    small = {"nvidia.com/gpu": 1, "cpu": 4, "memory": "16Gi"}
    workloads = [
        {"name": f"j{i}", "team": "a", "duration": 600, "requests": small} for i in range(1200)
    ] + [  # larger than any type the pool may launch: pending, with a note, all run long
        {"name": f"big{i}", "team": "a", "duration": 600, "requests": {"nvidia.com/gpu": 16}}
        for i in range(300)
    ]
    scenario = load_scenario_data(
        {
            "cluster": {"nodes": []},
            "policy": {
                "cluster": {"fair_share": True},
                "teams": [{"name": "a", "quota": [{"resources": {"nvidia.com/gpu": 10_000}}]}],
            },
            "node_pools": [{"name": "gpu", "instance_types": ["g5.12xlarge"]}],
            "workloads": workloads,
        },
        ROOT,
    )
    began = time.process_time()
    result = run_scenario(scenario)
    seconds = time.process_time() - began
    assert sum(r.state == "finished" for r in result.records.values()) == 1200
    pending_events = sum(e["event"] == "pending" for e in result.events)
    assert pending_events <= 2 * len(workloads)  # was about 12 per job
    assert seconds < 12, f"{seconds:.1f} s of processor time (about 2 s; was over 20)"


PENDING = "workloads: [{name: w, team: a, requests: {cpu: 1}}]\n"

SPOT = """
cluster: {nodes: []}
policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 8}}]}]}
node_pools: [{name: gpu, instance_types: [g5.xlarge], capacity_types: [spot]}]
cloud: {seed: 1, spot_interruption_rate_per_hour: %s}
autoscaler: {disruption_interval_seconds: 1000000}
workloads: [{name: long, team: a, duration: %s, requests: {nvidia.com/gpu: 1}}]
"""


def test_a_spot_interruption_rate_beyond_reason_is_refused(tmp_path: Path) -> None:
    """``spot_interruption_rate_per_hour: 1000`` hung: every spot node was interrupted before it
    was Ready and another was launched, for ever. The rate is bounded where it is read."""
    scenario = write(tmp_path, "spot.yaml", SPOT % (1000, 3600))
    code, out = run("scenario", "run", str(scenario))
    assert code == 2
    one_error_line(out, "cloud.spot_interruption_rate_per_hour", "above the most simulated, 10")


def test_a_run_whose_work_is_restarted_for_ever_stops_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the highest rate allowed, a 10-hour job on spot nodes is interrupted long before it
    ends (each run survives with e^-100): the run stops once one workload was restarted more
    than the limit with no progress, saying so, in `scenario run` and in `simulate`."""
    from fleetshare.scenario import runner

    monkeypatch.setattr(runner, "MAX_RESTARTS_WITHOUT_PROGRESS", 20)
    scenario = write(tmp_path, "spot.yaml", SPOT % (10, 36_000))
    code, out = run("scenario", "run", str(scenario))
    assert code == 2
    one_error_line(out, "long was restarted 21 times", "cannot end", "spot-interruption")
    code, out = run("simulate", str(scenario), "-p", "fair-share-autoscale", "--jobs", "1")
    assert code == 2
    ends_with_error_line(out, "long was restarted 21 times")


def test_a_run_without_progress_for_too_long_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restarts that come rarely (a 100-hour job, a spot node lasting 2 hours on average) are
    caught by the time bound: no progress for twice the longest duration (at least
    ``MIN_HORIZON_SECONDS``, here lowered to one day)."""
    from fleetshare.scenario import runner

    monkeypatch.setattr(runner, "MIN_HORIZON_SECONDS", 86_400.0)
    scenario = write(tmp_path, "spot.yaml", SPOT % (0.5, 360_000))
    code, out = run("scenario", "run", str(scenario))
    assert code == 2
    one_error_line(out, "8.33 days without progress", "long is")


def test_endless_work_with_a_pool_schedule_ends(tmp_path: Path) -> None:
    """A workload without a duration on an autoscaled pool with a daily schedule ran for ever
    (a wake-up each day while the endless work kept the cluster busy): endless work alone no
    longer keeps a run without ``until`` going."""
    scenario = write(
        tmp_path,
        "endless.yaml",
        "cluster: {nodes: []}\n"
        "policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 8}}]}]}\n"
        "node_pools: [{name: gpu, families: [g5], schedules: [{schedule: '0 20 * * *', "
        "duration_seconds: 43200, min_nodes: 1, instance_type: g5.xlarge}]}]\n"
        "workloads: [{name: w, team: a, requests: {nvidia.com/gpu: 1}}]\n",
    )
    code, out = run("scenario", "run", str(scenario), "--json")
    assert code == 0, out
    assert '"state": "admitted"' in out


def test_simulate_refuses_work_of_a_team_only_a_policy_change_brings(tmp_path: Path) -> None:
    """`simulate` runs one policy throughout (policy changes are ignored): a workload of a team
    that only a policy change adds was never admitted, silently."""
    scenario = write(
        tmp_path,
        "later.yaml",
        "cluster: {nodes: [{name: n, allocatable: {nvidia.com/gpu: 8, cpu: 8}}]}\n"
        "policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 4}}]}]}\n"
        "policy_changes: [{at: 100, policy: {teams: [{name: a}, {name: b}]}}]\n"
        "workloads: [{name: wb, team: b, duration: 50, requests: {nvidia.com/gpu: 1}}]\n",
    )
    code, out = run("simulate", str(scenario), "-p", "fair-share", "--jobs", "1")
    assert code == 2
    one_error_line(out, "workloads[0](wb).team: team 'b' is not in the base policy")
    code, out = run("scenario", "run", str(scenario))  # there the change brings it in time
    assert code == 0 and "finished" in out


@pytest.mark.parametrize(
    ("pool", "words"),
    [
        ("families: [g55]", "node_pools[0](gpu).families[0]: unknown instance family 'g55'"),
        ("instance_types: [g5.huge]", "node_pools[0](gpu).instance_types[0]: unknown instance"),
        ("gpu_models: [a1000]", "node_pools[0](gpu).gpu_models[0]: unknown GPU model 'a1000'"),
        (
            "instance_groups: [{name: g, instance_type: ml.g55.xlarge, max_count: 2}]",
            "instance_groups[0](g).instance_type: unknown instance type 'ml.g55.xlarge'",
        ),
        ("families: [g5], architectures: [arm64]", "could launch nothing"),
        ("families: [g5], capacity_types: []", "node_pools[0](gpu).capacity_types: empty"),
    ],
    ids=[
        "family",
        "instance-type",
        "gpu-model",
        "instance-group",
        "no-type-matches",
        "no-capacity-type",  # once accepted: every pod "matches no pool", no field named
    ],
)
def test_node_pools_naming_unknown_hardware(tmp_path: Path, pool: str, words: str) -> None:
    """Node pools with a typo in a family or type launched nothing, silently: their work
    waited for ever. Now the field and the reason, in scenarios and in `plan --pools`."""
    scenario = write(
        tmp_path,
        "pools.yaml",
        "cluster: {nodes: []}\n"
        "policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 8}}]}]}\n"
        f"node_pools: [{{name: gpu, {pool}}}]\n"
        "workloads: [{name: w, team: a, requests: {nvidia.com/gpu: 1}}]\n",
    )
    code, out = run("scenario", "run", str(scenario))
    assert code == 2
    one_error_line(out, words)
    pools = write(tmp_path, "plan-pools.yaml", f"pools: [{{name: gpu, {pool}}}]\n")
    pending = write(tmp_path, "pending.yaml", PENDING)
    code, out = run("plan", "--pools", str(pools), "--pending", str(pending))
    assert code == 2
    one_error_line(out, words.replace("node_pools[0]", "pools[0]"))


def test_plan_nodes_of_an_unknown_instance_type(tmp_path: Path) -> None:
    nodes = write(tmp_path, "nodes.yaml", "nodes: [{instance_type: zz.large}]\n")
    pending = write(tmp_path, "pending.yaml", PENDING)
    code, out = run("plan", "--pools", str(POOLS), "--pending", str(pending), "--nodes", str(nodes))
    assert code == 2  # was exit 1, "UnknownInstanceTypeError"
    one_error_line(out, "nodes.yaml: nodes[0]: unknown instance type 'zz.large'")


def test_hyperpod_json_naming_an_unknown_instance_type(tmp_path: Path) -> None:
    """Imported as written before, to a flavor no node could ever belong to."""
    quota = write(
        tmp_path,
        "quota.json",
        '{"ComputeQuotaTarget": {"TeamName": "a"}, "ComputeQuotaConfig": '
        '{"ComputeQuotaResources": [{"InstanceType": "ml.g55.8xlarge", "Count": 2}]}}',
    )
    code, out = run("policy", "import", "hyperpod", str(quota))
    assert code == 2
    text = " ".join(out.split())
    assert text.startswith("error: ") and "Traceback" not in out
    assert "ComputeQuotaResources[0].InstanceType: unknown instance type 'ml.g55.8xlarge'" in text


def test_a_limit_on_an_unknown_instance_type(tmp_path: Path) -> None:
    """A borrow limit naming an instance type no quota and no catalog entry knows made a flavor
    of its own (with instance types as flavors), silently."""
    policy = write(
        tmp_path,
        "policy.yaml",
        "teams:\n  - name: a\n    quota: [{instance_type: ml.g5.8xlarge, count: 2}]\n"
        "    borrow_limits: [{resource: nvidia.com/gpu, flavor: ml.zz.large, absolute: 1}]\n",
    )
    code, out = run("policy", "validate", str(policy))
    assert code == 2
    one_error_line(out, "teams[0](a).borrow_limits[0].flavor: unknown instance type 'ml.zz.large'")


def test_a_quota_above_one_instance_is_that_many_instances(tmp_path: Path) -> None:
    """16 accelerators of an 8-GPU type: HyperPod allocates per instance group, so this is two
    instances' worth (vCPU and memory follow), shown as such; where the cluster is known and has
    fewer, each run warns that guaranteed work may wait. A type without accelerators, or a MIG
    profile its GPUs lack, is an error."""
    policy = write(
        tmp_path,
        "policy.yaml",
        "teams:\n  - name: a\n    quota: [{instance_type: ml.p4d.24xlarge, accelerators: 16}]\n",
    )
    code, out = run("policy", "validate", str(policy))
    assert code == 0
    assert "nvidia.com/gpu=16 on ml.p4d.24xlarge (2 instances)" in " ".join(out.split())
    scenario = write(
        tmp_path,
        "one-node.yaml",
        "cluster: {nodes: [{instance_type: ml.p4d.24xlarge}]}\n"
        "policy: {teams: [{name: a, quota: [{instance_type: ml.p4d.24xlarge, "
        "accelerators: 16}]}]}\n"
        "workloads: [{name: w, team: a, duration: 60, requests: {nvidia.com/gpu: 8}}]\n",
    )
    code, out = run("scenario", "run", str(scenario))
    assert code == 0
    assert "quotas for nvidia.com/gpu on ml.p4d.24xlarge add up to 16" in " ".join(out.split())
    cpu_type = write(
        tmp_path,
        "cpu.yaml",
        "teams: [{name: a, quota: [{instance_type: m5.large, accelerators: 4}]}]",
    )
    code, out = run("policy", "validate", str(cpu_type))
    assert code == 2
    one_error_line(out, "instance type m5.large has no accelerators")


@pytest.mark.parametrize(
    ("where", "words"),
    [
        (
            "cluster: {nodes: [{name: n, count: 1000000000, allocatable: {cpu: 8}}]}\n"
            "workloads: []",
            "cluster.nodes[0](n).count: 1,000,000,000 is more than 100,000",
        ),
        (
            "cluster: {nodes: [{name: n, allocatable: {cpu: 8}}]}\n"
            "workloads: [{name: w, team: a, pods: 2147483648, requests: {cpu: 0}}]",
            "workloads[0](w).pods: 2,147,483,648 is more than 100,000",
        ),
    ],
    ids=["a billion nodes", "two billion pods"],
)
def test_absurd_counts_are_refused(tmp_path: Path, where: str, words: str) -> None:
    """A billion nodes took 7 GB and never ended; two billion pods asking for nothing were
    placed one by one for ever (first fit now places as many as fit at once, too)."""
    scenario = write(
        tmp_path,
        "big.yaml",
        where + "\npolicy: {teams: [{name: a, quota: [{resources: {cpu: 4}}]}]}\n",
    )
    code, out = run("scenario", "run", str(scenario))
    assert code == 2
    one_error_line(out, words)


def test_plan_pending_with_duplicate_names(tmp_path: Path) -> None:
    pending = write(
        tmp_path,
        "pending.yaml",
        "workloads: [{name: a, team: t, requests: {cpu: 1}},\n"
        "            {name: a, team: t, requests: {cpu: 2}}]\n",
    )
    code, out = run("plan", "--pools", str(POOLS), "--pending", str(pending))
    assert code == 2  # was a pydantic ValidationError escaping
    one_error_line(out, "workload names must be unique; repeated: a")


def test_simulate_out_naming_a_file_or_an_impossible_place(tmp_path: Path) -> None:
    """``--out`` naming an existing file failed with FileExistsError after the whole run."""
    existing = write(tmp_path, "report", "x")
    for out_path, words in (
        (existing, "exists and is not a folder"),
        (existing / "below", "cannot create the folder"),
    ):
        args = ["--days", "0.01", "-p", "static", "--jobs", "1", "--out", str(out_path)]
        code, out = run("simulate", "--trace", "philly", *args)
        assert code == 2
        ends_with_error_line(out, f"--out {out_path}", words)


def _trace_copy(tmp_path: Path, folder: str) -> Path:
    data = tmp_path / "data"
    shutil.copytree(BUNDLED_DATA / folder, data / folder)
    return data


@pytest.mark.parametrize(
    ("cell", "words"),
    [
        ("inf", "cpu_milli 'inf' is not a finite number"),
        ("nan", "cpu_milli 'nan' is not a finite number"),
        ("abc", "cpu_milli 'abc' is not a number"),
    ],
)
def test_alibaba_cells_that_are_not_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cell: str, words: str
) -> None:
    """Found by the fuzz test: ``inf`` escaped as OverflowError, ``nan`` as "cannot convert
    float NaN to integer", and neither named the file or the row."""
    data = _trace_copy(tmp_path, "alibaba-gpu-v2023")
    pods = data / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    rows = pods.read_text().splitlines()
    cells = rows[1].split(",")
    cells[1] = cell
    pods.write_text("\n".join([rows[0], ",".join(cells), *rows[2:]]) + "\n")
    monkeypatch.setenv(DATA_ENV, str(data))
    code, out = run("simulate", "--trace", "alibaba", "-p", "static", "--jobs", "1")
    assert code == 2
    ends_with_error_line(out, "openb_pod_list_default.csv: row 2:", words)


def test_dlrm_rows_without_any_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the fuzz test: a DLRM file whose rows have no times said only "max() arg is
    an empty sequence"."""
    data = _trace_copy(tmp_path, "alibaba-dlrm")
    path = data / "alibaba-dlrm" / "disaggregated_DLRM_trace.csv.gz"
    rows = gzip.decompress(path.read_bytes()).decode().splitlines()[:50]  # no times yet
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    monkeypatch.setenv(DATA_ENV, str(data))
    code, out = run("simulate", "--trace", "dlrm", "-p", "static", "--jobs", "1")
    assert code == 2
    ends_with_error_line(out, "disaggregated_DLRM_trace.csv.gz: no row has a creation")


def test_helios_quota_row_with_an_extra_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the fuzz test: a quota row longer than the header escaped as "int() argument
    must be ... not 'list'"; a cell that is no count names its row and column."""
    data = _helios_copy(tmp_path)
    quota = data / "helios-earth" / "vc_gpu_quota_daily.csv"
    rows = quota.read_text().splitlines()
    rows[1] += ",7"
    quota.write_text("\n".join(rows) + "\n")
    monkeypatch.setenv(DATA_ENV, str(data))
    args = ["--days", "0.05", "-p", "static", "--jobs", "1"]
    code, out = run("simulate", "--trace", "helios", *args)
    assert code in (0, 2) and "Traceback" not in out and "'list'" not in out
    rows[2] = rows[2].replace(",112,", ",lots,", 1)
    quota.write_text("\n".join(rows) + "\n")
    code, out = run("simulate", "--trace", "helios", *args)
    assert code == 2
    ends_with_error_line(out, "vc_gpu_quota_daily.csv: row 3: vchbv 'lots' is not a number")


def test_alibaba_node_with_an_unknown_gpu_model_is_refused_at_load(tmp_path: Path) -> None:
    """Found by the fuzz test: a node list naming GPU model 'P' loaded, ran, and then the
    pricing after the run raised a ValueError (a traceback). Refused at load, naming the row."""
    from fleetshare.inputs import InputError
    from fleetshare.traces.openb import load_nodes

    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,V100M32\nn2,1,1,2,P\n")
    with pytest.raises(InputError, match=r"row 3: model: no priced instance type .* 'P'"):
        load_nodes(nodes)


def test_simulated_time_that_hardly_moves_stops(tmp_path: Path) -> None:
    """``disruption_interval_seconds: 1e-9`` woke the autoscaler every nanosecond: time crawled
    and the run never reached the job's end. The interval is at least a second at the schema,
    and a run stops when 10,000 instants fall within one simulated second."""
    from fleetshare.scenario.loader import load_scenario
    from fleetshare.scenario.runner import RunLimitError, Runner

    body = (
        "cluster: {nodes: []}\n"
        "policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 8}}]}]}\n"
        "node_pools: [{name: gpu, instance_types: [g5.xlarge]}]\n"
        "autoscaler: {disruption_interval_seconds: %s}\n"
        "workloads: [{name: w, team: a, duration: 600, requests: {nvidia.com/gpu: 1}}]\n"
    )
    code, out = run("scenario", "run", str(write(tmp_path, "tiny.yaml", body % "1e-9")))
    assert code == 2
    one_error_line(out, "autoscaler.disruption_interval_seconds", "greater than or equal to 1")
    runner = Runner(load_scenario(write(tmp_path, "ok.yaml", body % "1")))
    assert runner.autoscaler is not None  # past the schema, as a backend might configure it
    settings = runner.autoscaler.settings
    runner.autoscaler.settings = settings.model_copy(update={"disruption_interval_seconds": 1e-9})
    with pytest.raises(RunLimitError, match="10,001 instants within one simulated second"):
        runner.run()


@pytest.mark.parametrize(
    ("name", "command", "text", "words"),
    [
        (
            "policy.yaml",
            "validate",
            "teams: [{name: a, quota: [{instance_type: ml.g5.8xlarge, vcpu: 1e308}]}]",
            "quota[0].vcpu: Input should be less than or equal to 1000000000",
        ),
        (
            "policy.yaml",
            "validate",
            "teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 4}}],\n"
            "         lending_limits: [{resource: nvidia.com/gpu, absolute: -2}]}]",
            "must not be negative",
        ),
        ("pools.yaml", "plan-pools", "pools: [{name: p, limits: {cpu: -8}}]", "must not be"),
        (
            "pending.yaml",
            "plan-pending",
            "workloads: [{name: w, team: t, requests: {cpu: 12Qi}}]",
            "requests: cpu",
        ),
        (
            "scenario.yaml",
            "run",
            SCENARIO.replace("requests:", "duration: .inf, requests:") % "1",
            "is not a finite number",
        ),
    ],
    ids=[
        "vcpu-1e308",
        "negative-lending-limit",
        "negative-pool-limit",
        "bad-quantity-in-pending",
        "endless-infinite-duration",
    ],
)
def test_more_classes_from_the_issue(
    tmp_path: Path, name: str, command: str, text: str, words: str
) -> None:
    """The issue's remaining classes: an OverflowError (vcpu 1e308 in a policy), and inputs
    accepted silently before (negative lending and pool limits, a numpy warning for
    ``duration: .inf``); a bad quantity in ``--pending`` escaped as a rich traceback."""
    path = write(tmp_path, name, text + "\n")
    pending = ROOT / "examples" / "pending.yaml"
    args = {
        "validate": ["policy", "validate", str(path)],
        "plan-pools": ["plan", "--pools", str(path), "--pending", str(pending)],
        "plan-pending": ["plan", "--pools", str(POOLS), "--pending", str(path)],
        "run": ["scenario", "run", str(path)],
    }[command]
    code, out = run(*args)
    assert code == 2
    one_error_line(out, words)


@pytest.mark.parametrize(("field", "name"), [("kueue", "queues.yaml"), ("hyperpod", "quota.json")])
def test_a_missing_policy_file_named_in_a_scenario_is_not_found(
    tmp_path: Path, field: str, name: str
) -> None:
    """Issue 14: a file name that does not exist used to be parsed as the policy text
    ("not valid JSON: line 1, column 1")."""
    scenario = write(
        tmp_path,
        "s.yaml",
        f"name: s\ncluster: {{nodes: [{{instance_type: p4d.24xlarge}}]}}\n{field}: {name}\n",
    )
    code, out = run("scenario", "run", str(scenario))
    assert code == 2
    one_error_line(out, f"{field}: file not found", str(tmp_path / name))
    assert "not valid JSON" not in out and "not a mapping" not in out


def test_version_and_short_help() -> None:
    from fleetshare import __version__

    code, out = run("--version")
    assert (code, out.strip()) == (0, f"fleetshare {__version__}")
    for args in (["-h"], ["simulate", "-h"], ["scenario", "run", "-h"]):
        code, out = run(*args)
        assert code == 0 and "Usage:" in out and "Options" in out, args


def test_help_does_not_load_the_engine() -> None:
    """``fleetshare --help`` imports neither scipy nor matplotlib nor the engine (it used to
    take 2 s importing the provisioner's solver); measured in bench, asserted here by what is
    imported, which does not depend on the machine's speed."""
    import subprocess
    import sys

    code = (
        "import sys; from fleetshare.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('scipy', 'matplotlib', 'fleetshare.governance.cycle', "
        "'fleetshare.autoscaling.provisioner') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "HEAVY []" in out, out


@pytest.mark.parametrize(
    ("param", "words"),
    [
        ("borrow_limit=10001%", "borrow_limit=10001%: percent_of_idle: Input should be less than"),
        ("borrow_limit=-5", "borrow_limit=-5: absolute: quantity must not be negative"),
        ("borrow_limit=x%", "borrow_limit=x%: want a percentage such as 50%"),
        ("min_runtime=-5", "min_runtime=-5: min_runtime_seconds: Input should be greater"),
        ("min_runtime=abc", "min_runtime=abc: want a number"),
        ("fair_share_weight.vc3sl=-1", "fair_share_weight.vc3sl=-1: fair_share_weight: Input"),
        # a trailing comma once added a silent run without any borrow limit
        ("borrow_limit=25%,", "borrow_limit: an empty value (write none for no limit)"),
    ],
)
def test_sweep_parameter_values_are_checked_before_any_run(
    tmp_path: Path, param: str, words: str
) -> None:
    """A bad value once crashed the worker pool (``BrokenProcessPool``, exit 1) or printed a
    bare ``could not convert string to float``."""
    code, out = run(
        *("sweep", "--trace", "helios", "--start-day", "14", "--days", "0.25"),
        *("-p", "fair-share", "--param", param, "--jobs", "2", "--out", str(tmp_path / "o")),
    )
    assert code == 2, out
    one_error_line(out, "sweep parameter", words)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("{bogus: 1}", "--warm-capacity: bogus: Extra inputs are not permitted"),
        ("{horizon_seconds: -5}", "--warm-capacity: horizon_seconds: Input should be greater"),
    ],
)
def test_a_bad_warm_capacity_setting_names_the_field(setting: str, words: str) -> None:
    """Once a raw pydantic report over several lines, with a link to pydantic's site."""
    code, out = run(
        *("simulate", "--trace", "helios", "--start-day", "14", "--days", "0.25"),
        *("-p", "static-autoscale", "--warm-capacity", setting),
    )
    assert code == 2, out
    one_error_line(out, words)
    assert "pydantic" not in out


def test_plan_with_nothing_pending_says_so(tmp_path: Path) -> None:
    """An empty pending list once printed an empty table and a 0.0000 $/h "best bound"."""
    for text in ("workloads: []\n", ""):
        pending = write(tmp_path, "pending.yaml", text)
        code, out = run("plan", "--pools", str(POOLS), "--pending", str(pending))
        assert code == 0, out
        assert out.strip() == "nothing to launch: no pending pods"
    result = CliRunner().invoke(
        app, ["plan", "--pools", str(POOLS), "--pending", str(pending), "--json"]
    )
    data = json.loads(result.stdout)
    assert data["launches"] == [] and data["unplaceable"] == [] and data["hourly_cost"] == 0


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_a_misspelt_trace_lists_the_traces(tmp_path: Path, command: str) -> None:
    """``simulate --trace helio`` once spoke only of files and bundled scenarios; ``sweep``
    announced a sweep of it before saying it does not exist."""
    extra = ("--out", str(tmp_path / "o")) if command == "sweep" else ()
    code, out = run(command, "--trace", "helio", "--days", "1", "-p", "static", *extra)
    assert code == 2, out
    one_error_line(out, "'helio'", "helios, philly")


def test_sweep_help_gives_no_default_for_its_required_policies() -> None:
    """``sweep -p`` is required; its help once promised the defaults of ``simulate -p``."""
    for command, default in (("simulate", True), ("sweep", False)):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "1000"})
        policy_help = next(line for line in result.output.splitlines() if "--policy" in line)
        assert ("Default: static" in policy_help) is default, policy_help


GPU_AND_A_HALF = "{name: w, team: a, requests: {nvidia.com/gpu: 1.5, cpu: 1}, duration: 600}"


def test_plan_buys_no_node_for_a_gpu_request_no_node_can_serve(tmp_path: Path) -> None:
    """1.5 GPUs is neither whole GPUs nor a share of one: governance never places it, yet
    ``plan`` once bought a 4-GPU g6.12xlarge for it."""
    pending = write(
        tmp_path,
        "pending.yaml",
        "workloads:\n  - "
        + GPU_AND_A_HALF.replace(
            "}, duration", "}, tolerations: [{key: nvidia.com/gpu, operator: Exists}], duration"
        ),
    )
    code, out = run("plan", "--pools", str(POOLS), "--pending", str(pending))
    assert code == 1, out
    assert "cannot place 1 pods of cpu=1, nvidia.com/gpu=1.5 (w)" in " ".join(out.split())
    assert "neither whole GPUs nor a share of one GPU" in " ".join(out.split())
    result = CliRunner().invoke(
        app, ["plan", "--pools", str(POOLS), "--pending", str(pending), "--json"]
    )
    data = json.loads(result.stdout)
    assert data["launches"] == [] and data["hourly_cost"] == 0
    assert data["unplaceable"][0]["workloads"] == ["w"]


def test_the_autoscaler_buys_no_node_for_a_gpu_request_no_node_can_serve(tmp_path: Path) -> None:
    """It once launched a g5.12xlarge for 1.5 GPUs and kept it until consolidation."""
    scenario = write(
        tmp_path,
        "s.yaml",
        "cluster: {nodes: []}\n"
        "policy: {teams: [{name: a, quota: [{resources: {nvidia.com/gpu: 8, cpu: 64}}]}]}\n"
        "node_pools: [{name: gpu, families: [g5], capacity_types: [on-demand]}]\n"
        f"workloads:\n  - {GPU_AND_A_HALF}\n",
    )
    result = CliRunner().invoke(app, ["scenario", "run", str(scenario), "--json"])
    data = json.loads(result.stdout)
    assert data["nodes"] == []
    assert data["workloads"]["w"]["state"] == "pending"
    assert "neither whole GPUs nor a share of one GPU" in data["workloads"]["w"]["pending_reason"]


def test_warm_capacity_without_an_autoscaled_policy_says_it_is_unused() -> None:
    """``--warm-capacity`` with fixed-cluster policies only was ignored without a word."""
    result = CliRunner().invoke(
        app,
        [
            *("simulate", "--trace", "helios", "--start-day", "14", "--days", "0.1"),
            *("-p", "static", "--warm-capacity", "{}", "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)
    assert "--warm-capacity applies to -autoscale policies" in " ".join(result.stderr.split())


def test_policy_validate_counts_in_words(tmp_path: Path) -> None:
    """One team and no group read as such, not "1 teams, 0 groups"."""
    policy = write(
        tmp_path, "one.yaml", "teams:\n  - name: solo\n    quota: [{resources: {cpu: 4}}]\n"
    )
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("valid: 1 team, 0 groups\n")


def test_policy_validate_warns_of_a_quota_flavor_no_catalog_type_matches(tmp_path: Path) -> None:
    """``{instance_type: ml.g5.8xlarg, resources: ...}`` was "valid", a quota on a flavor no
    node would ever count in (flavors may be custom node types, so a warning, not an error)."""
    policy = write(
        tmp_path,
        "policy.yaml",
        "teams:\n  - name: v\n"
        "    quota: [{instance_type: ml.g5.8xlarg, resources: {nvidia.com/gpu: 2}}]\n",
    )
    result = CliRunner().invoke(app, ["policy", "validate", str(policy)], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("valid:")
    warning = " ".join(result.stderr.split())
    assert warning.startswith("warning: teams[0](v).quota[0]: unknown instance type")
    assert "did you mean ml.g5.8xlarge" in warning
    ok = write(tmp_path, "ok.yaml", POLICY)
    assert CliRunner().invoke(app, ["policy", "validate", str(ok)]).stderr == ""
