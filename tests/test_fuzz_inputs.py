"""Fuzz every entry point with corrupted versions of valid files, through the real CLI.

Each kind of input fleetshare reads starts from a valid file (policies in YAML and JSON,
HyperPod JSON, Kueue YAML, scenarios, `plan` pools/pending/nodes, small slices of the bundled
traces) and hypothesis corrupts it: fields replaced by wrong types, non-finite and absurd
numbers, negative amounts, deep nesting, unknown or missing fields; or the bytes themselves:
invalid UTF-8, truncation, stray bytes, duplicated keys, broken gzip. CLI options get hostile
values too. Every input runs the command in-process (``typer.testing.CliRunner`` on
``fleetshare.cli.app``), which must give either a valid result (exit 0, or 1 for a failed
``expect:``) or one clean line (``error: ...``, exit 2; click's own usage errors also exit 2),
never an exception escaping, a traceback, an internal message, or a hang.

Deterministic (``derandomize=True``) and bounded (``max_examples`` per kind); the number of
generated inputs run is printed at the end of the session (``fuzz: N generated inputs``).
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import os
import re
import shutil
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.traces.common import BUNDLED_DATA, DATA_ENV
from tests.conftest import FUZZ_INPUTS

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SCENARIOS = ROOT / "src" / "fleetshare" / "scenarios"
HANG_SECONDS = 60
LOG = os.environ.get("FLEETSHARE_FUZZ_LOG")
"""A file to append each input's kind, exit code and error line to (for looking, not CI)."""
"""One input running longer than this is a hang (the slowest valid ones take a few seconds)."""

INTERNAL = re.compile(
    r"arg is an empty sequence|object is not subscriptable|has no attribute|unsupported "
    r"operand|not supported between instances|index out of range|division by zero|"
    r"unhashable type|is not iterable|positional argument|object is not callable|"
    r"cannot convert float|could not convert|invalid literal for|NoneType|run with --debug|"
    r"KeyError|\Aerror: '[^']*'\Z"
)
"""Python's own words: an internal error that leaked through a broad ``except`` (or the CLI's
last-resort handler) instead of a message about the input."""


SCALE = float(os.environ.get("FLEETSHARE_FUZZ_SCALE", "1"))
"""More examples per kind for a longer search by hand (CI runs 1)."""
RANDOM = os.environ.get("FLEETSHARE_FUZZ_RANDOM") == "1"
"""Different inputs on every run (for searching by hand; CI is deterministic)."""


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=max(1, round(examples * SCALE)),
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


# -- running the CLI -----------------------------------------------------------------------------


@contextmanager
def hang_guard(seconds: int, what: str) -> Iterator[None]:
    def fire(*_: object) -> None:
        raise AssertionError(f"hang: no answer within {seconds} s for {what}")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(counts: dict[str, int], kind: str, args: list[str], env: dict[str, str] | None = None):
    """Run ``fleetshare ARGS``; assert a valid result or one clean error line."""
    counts[kind] = counts.get(kind, 0) + 1
    began = time.perf_counter()
    with hang_guard(HANG_SECONDS, f"fleetshare {' '.join(args)}"):
        result = CliRunner().invoke(app, args, env={"COLUMNS": "1000", **(env or {})})
    seconds = time.perf_counter() - began
    exc = result.exception
    shown = f"fleetshare {' '.join(args)}\n{result.output[-2000:]}"
    if exc is not None and not isinstance(exc, SystemExit):
        trace = "".join(traceback.format_exception(exc))
        raise AssertionError(f"exception escaped: {shown}\n{trace}")
    out = result.output
    if LOG:
        first = next((ln for ln in out.splitlines() if ln.startswith("error: ")), "")
        with open(LOG, "a") as log:
            log.write(f"{kind}\t{result.exit_code}\t{seconds:.2f}\t{first[:160]}\n")
    assert "Traceback" not in out, shown
    assert result.exit_code in (0, 1, 2), shown
    if result.exit_code == 0:
        return
    lines = [line for line in out.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    if result.exit_code == 2 and not errors:
        assert any("Usage:" in line for line in lines), shown  # click's own usage error
        return
    if result.exit_code == 1:
        assert not errors or "expectations" in out, shown  # 1: a failed expect block only
        return
    assert len(errors) == 1, shown
    message = " ".join(" ".join(lines[errors[0] :]).split())
    assert not INTERNAL.search(message), f"internal error text: {shown}"


@pytest.fixture(scope="module")
def counts(pytestconfig: pytest.Config) -> dict[str, int]:
    return pytestconfig.stash[FUZZ_INPUTS]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


SERIAL = [0]


def fresh(work: Path, name: str, data: bytes) -> Path:
    """A new file for one generated input (hypothesis reuses the fixture's folder)."""
    SERIAL[0] += 1
    folder = work / f"case{SERIAL[0]}"
    folder.mkdir()
    path = folder / name
    path.write_bytes(data)
    return path


# -- corrupting documents ------------------------------------------------------------------------

DEEP = "\u2063DEEP\u2063"
"""A placeholder replaced by deep nesting after serialising (emitters recurse)."""

ODD_TEXT = [
    "",
    " ",
    "-4",
    "1e30",
    "1e400",
    ".inf",
    "NaN",
    "-0",
    "0x10",
    "12Qi",
    "500m",
    "-500m",
    "16Gi",
    "1e-9",
    "ml.zz9.large",
    "g55",
    "mig-9g.99gb",
    "nvidia.com/gpu",
    "*",
    "default",
    "team-a",
    "a/b/c",
    "\u00e9\u00e8",
    "\u202e",
    "x" * 300,
    "0 0 31 2 *",
    "Enabled",
    "LendAndBorrow",
    "true",
]
ODD_NUMBERS: list[Any] = [
    0,
    -1,
    -4,
    1,
    2**31,
    2**63,
    10**30,
    -(10**30),
    1e308,
    -1e308,
    1e-320,
    0.5,
    -0.0,
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    False,
]


def hostile_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.sampled_from(ODD_NUMBERS),
        st.sampled_from(ODD_TEXT),
        st.none(),
        st.integers(min_value=-(10**6), max_value=10**6),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.dictionaries(st.sampled_from(["name", "x", "count", "requests"]), scalars, max_size=2),
        st.just(DEEP),
    )


def places(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``doc`` (keys and list indices)."""
    yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from places(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from places(value, (*path, i))


def parent_of(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with one to three fields replaced, removed, added or emptied."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in places(doc) if p]
        if not paths:
            return draw(hostile_values())
        path = draw(st.sampled_from(paths))
        parent = parent_of(doc, path)
        key = path[-1]
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "empty"]))
        if action == "replace":
            parent[key] = draw(hostile_values())
        elif action == "delete":
            del parent[key]
        elif action == "add":
            if isinstance(parent, dict):
                parent[draw(st.sampled_from(KEYS))] = draw(hostile_values())
            else:
                parent.append(copy.deepcopy(parent[key]))
        else:
            value = parent[key]
            parent[key] = {} if isinstance(value, dict) else [] if isinstance(value, list) else ""
    return doc


def deep(text: str, levels: int, as_json: bool) -> str:
    nested = "[" * levels + "1" + "]" * levels
    quoted = json.dumps(DEEP) if as_json else None
    if quoted and quoted in text:
        return text.replace(quoted, nested)
    return text.replace(f"'{DEEP}'", nested).replace(DEEP, nested)


def dump(doc: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=1)  # NaN and Infinity come out as such: not JSON
    if fmt == "yaml-all":
        return yaml.safe_dump_all(doc, sort_keys=False, allow_unicode=True)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@st.composite
def damaged_bytes(draw: st.DrawFn, text: str, fmt: str) -> bytes:
    """The serialised text, and sometimes its bytes, damaged."""
    if DEEP in text or json.dumps(DEEP) in text:
        text = deep(text, draw(st.sampled_from([3, 70, 5000])), fmt == "json")
    data = text.encode()
    action = draw(
        st.sampled_from(["none", "none", "none", "truncate", "bad-byte", "latin1", "nul", "dup"])
    )
    if action == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif action == "bad-byte":
        at = draw(st.integers(0, len(data)))
        data = (
            data[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xe9", b"\x80"])) + data[at:]
        )
    elif action == "latin1":
        data = text.replace("a", "\u00e9", 1).encode("latin-1", errors="replace")
    elif action == "nul":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + b"\x00" + data[at:]
    elif action == "dup" and fmt != "json":
        first = text.splitlines()[0] if text else "x: 1"
        data = (text + "\n" + first + "\n").encode()
    return data


def corrupted(base: Any, fmt: str) -> st.SearchStrategy[bytes]:
    """Valid ``base`` (parsed) corrupted: fields first, then maybe the bytes."""
    if fmt == "yaml-all":
        docs = st.integers(0, len(base) - 1).flatmap(
            lambda i: mutated(base[i]).map(lambda d: [*base[:i], d, *base[i + 1 :]])
        )
    else:
        docs = mutated(base)
    return docs.flatmap(lambda doc: damaged_bytes(dump(doc, fmt), fmt))


# -- the valid inputs ----------------------------------------------------------------------------

POLICY = yaml.safe_load(
    """
cluster:
  priority_classes: [{name: inference, weight: 90}, {name: training, weight: 70}]
  fair_share: true
  idle_resource_sharing: true
  preemption: {min_runtime_seconds: 300}
  starvation_guard_seconds: 600
groups:
  - name: research
    quota: [{instance_type: ml.g5.8xlarge, count: 1}]
    lending_limits: [{resource: nvidia.com/gpu, absolute: 1}]
teams:
  - name: vision
    group: research
    quota:
      - {instance_type: ml.p4d.24xlarge, accelerators: 8}
      - {instance_type: ml.g5.8xlarge, count: 2}
      - {instance_type: ml.p4d.24xlarge, accelerator_partition: {type: mig-1g.5gb, count: 7}}
    sharing: LendAndBorrow
    borrow_limits:
      - {resource: nvidia.com/gpu, absolute: 8, percent_of_idle: 50}
      - {resource: cpu, flavor: ml.g5.8xlarge, percent_of_quota: 50}
    fair_share_weight: 2
    preempt_team_tasks: LowerPriority
  - name: product
    quota: [{instance_type: ml.g5.8xlarge, vcpu: 16, memory_gib: 64}]
    sharing: Lend
    local_queues: [product/default]
"""
)
HYPERPOD = json.loads((FIXTURES / "hyperpod_walkthrough.json").read_text())
KUEUE = [d for d in yaml.safe_load_all((FIXTURES / "kueue_full.yaml").read_text()) if d]
SCENARIO_FILES = ["hyperpod-walkthrough", "kueue-reclaim", "autoscaling-quota-aware"]
SCENARIO_DOCS = {n: yaml.safe_load((SCENARIOS / f"{n}.yaml").read_text()) for n in SCENARIO_FILES}
POOLS = yaml.safe_load((ROOT / "examples" / "pools.yaml").read_text())
PENDING = yaml.safe_load((ROOT / "examples" / "pending.yaml").read_text())
NODES = {"nodes": [{"instance_type": "g5.12xlarge", "count": 1, "zone": "us-east-1a"}]}


def _keys(doc: Any) -> set[str]:
    out: set[str] = set()
    for path in places(doc):
        out.update(str(step) for step in path if isinstance(step, str))
    return out


KEYS = sorted(
    set().union(
        *map(_keys, [POLICY, HYPERPOD, *KUEUE, *SCENARIO_DOCS.values(), POOLS, PENDING, NODES])
    )
    | {
        "sparkle",
        "until",
        "cloud",
        "autoscaler",
        "disruption_interval_seconds",
        "spot_interruption_rate_per_hour",
        "expire_after_seconds",
        "consolidate_after_seconds",
        "batch_idle_seconds",
        "headroom",
        "schedules",
        "instance_groups",
        "policy_changes",
        "events",
        "podsets",
        "node_affinity",
        "gpu_models",
        "families",
        "mig",
    }
)
"""Field names to add where a mutation adds one: every key of the valid inputs, and more."""


def test_the_valid_inputs_are_valid(counts: dict[str, int], work: Path) -> None:
    """The starting points pass, so corrupting them is what the fuzz tests measure."""
    policy = fresh(work, "policy.yaml", dump(POLICY, "yaml").encode())
    check(counts, "valid", ["policy", "validate", str(policy)])
    check(
        counts,
        "valid",
        ["policy", "import", "hyperpod", str(FIXTURES / "hyperpod_walkthrough.json")],
    )
    check(counts, "valid", ["policy", "import", "kueue", str(FIXTURES / "kueue_full.yaml")])
    for name in SCENARIO_FILES:
        check(counts, "valid", ["scenario", "run", str(SCENARIOS / f"{name}.yaml")])
    check(counts, "valid", plan_args(work, {}))


# -- policy files, HyperPod JSON, Kueue YAML -----------------------------------------------------


@fuzz_settings(300)
@given(data=corrupted(POLICY, "yaml"))
def test_fuzz_policy_yaml(counts: dict[str, int], work: Path, data: bytes) -> None:
    check(counts, "policy-yaml", ["policy", "validate", str(fresh(work, "policy.yaml", data))])


@fuzz_settings(100)
@given(data=corrupted(POLICY, "json"))
def test_fuzz_policy_json(counts: dict[str, int], work: Path, data: bytes) -> None:
    check(counts, "policy-json", ["policy", "validate", str(fresh(work, "policy.json", data))])


@fuzz_settings(250)
@given(data=corrupted(HYPERPOD, "json"), reading=st.sampled_from(["quota", "idle", "both"]))
def test_fuzz_hyperpod_json(counts: dict[str, int], work: Path, data: bytes, reading: str) -> None:
    path = fresh(work, "hyperpod.json", data)
    check(
        counts,
        "hyperpod-json",
        ["policy", "import", "hyperpod", str(path), "--borrow-limit-reading", reading],
    )


@fuzz_settings(120)
@given(data=corrupted(KUEUE, "yaml-all"))
def test_fuzz_kueue_yaml(counts: dict[str, int], work: Path, data: bytes) -> None:
    check(counts, "kueue-yaml", ["policy", "import", "kueue", str(fresh(work, "kueue.yaml", data))])


# -- scenario files ------------------------------------------------------------------------------


@fuzz_settings(180)
@given(
    name_and_data=st.sampled_from(SCENARIO_FILES).flatmap(
        lambda n: corrupted(SCENARIO_DOCS[n], "yaml").map(lambda d: (n, d))
    ),
    as_json=st.booleans(),
)
def test_fuzz_scenario_files(
    counts: dict[str, int], work: Path, name_and_data: tuple[str, bytes], as_json: bool
) -> None:
    name, data = name_and_data
    path = fresh(work, f"{name}.yaml", data)
    check(counts, "scenario", ["scenario", "run", str(path), *(["--json"] if as_json else [])])


@fuzz_settings(12)
@given(data=corrupted(SCENARIO_DOCS["hyperpod-walkthrough"], "yaml"))
def test_fuzz_scenario_under_simulate(counts: dict[str, int], work: Path, data: bytes) -> None:
    path = fresh(work, "scenario.yaml", data)
    check(
        counts,
        "simulate-scenario",
        [
            "simulate",
            str(path),
            "-p",
            "static",
            "-p",
            "fair-share-autoscale",
            "--jobs",
            "1",
            "--json",
        ],
    )


# -- plan: pools, pending, nodes -----------------------------------------------------------------


def plan_args(work: Path, files: dict[str, bytes]) -> list[str]:
    pools = files.get("pools") or dump(POOLS, "yaml").encode()
    pending = files.get("pending") or dump(PENDING, "yaml").encode()
    nodes = files.get("nodes") or dump(NODES, "yaml").encode()
    return [
        "plan",
        "--pools",
        str(fresh(work, "pools.yaml", pools)),
        "--pending",
        str(fresh(work, "pending.yaml", pending)),
        "--nodes",
        str(fresh(work, "nodes.yaml", nodes)),
        "--json",
    ]


@fuzz_settings(120)
@given(
    which_and_data=st.sampled_from(["pools", "pending", "nodes"]).flatmap(
        lambda w: corrupted({"pools": POOLS, "pending": PENDING, "nodes": NODES}[w], "yaml").map(
            lambda d: (w, d)
        )
    )
)
def test_fuzz_plan_files(
    counts: dict[str, int], work: Path, which_and_data: tuple[str, bytes]
) -> None:
    which, data = which_and_data
    check(counts, f"plan-{which}", plan_args(work, {which: data}))


# -- trace files (small slices of the bundled ones) ----------------------------------------------

TRACE_FILES = {
    "philly": ["philly/philly_node_sequence.csv.gz"],
    "helios": ["helios-earth/vc3sl.csv.gz", "helios-earth/vc_gpu_quota_daily.csv"],
    "dlrm": ["alibaba-dlrm/disaggregated_DLRM_trace.csv.gz"],
    "alibaba": [
        "alibaba-gpu-v2023/openb_pod_list_default.csv",
        "alibaba-gpu-v2023/openb_node_list_gpu_node.csv",
    ],
}
SLICE_ROWS = 400


@pytest.fixture(scope="module")
def sliced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled traces, each file cut to its first rows (quick to load, still valid)."""
    out = tmp_path_factory.mktemp("traces")
    for folder in BUNDLED_DATA.iterdir():
        if not folder.is_dir():
            continue
        (out / folder.name).mkdir()
        for path in folder.iterdir():
            target = out / folder.name / path.name
            if path.name.endswith(".csv.gz"):
                rows = gzip.decompress(path.read_bytes()).decode().splitlines()
                target.write_bytes(
                    gzip.compress(("\n".join(rows[: SLICE_ROWS + 1]) + "\n").encode())
                )
            elif path.name.endswith(".csv") and "quota" not in path.name:
                rows = path.read_text().splitlines()
                target.write_text("\n".join(rows[: SLICE_ROWS + 1]) + "\n")
            else:
                shutil.copy(path, target)
    return out


CELLS = [
    "",
    "nan",
    "inf",
    "-1",
    "-8",
    "1e308",
    "abc",
    "99999999999999999999",
    "\u00e9",
    "0",
    "2017-13-45 25:61:00",
    "2020-05-01",
    "1.5",
]


@st.composite
def damaged_csv(draw: st.DrawFn, text: str) -> bytes:
    """A CSV text with cells, rows or columns damaged, or its bytes."""
    rows = list(csv.reader(io.StringIO(text)))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(
            st.sampled_from(
                [
                    "cell",
                    "cell",
                    "cell",
                    "cell",
                    "cell",
                    "drop-row",
                    "swap",
                    "drop-column",
                    "no-header",
                    "header-only",
                    "extra-cell",
                ]
            )
        )
        body = len(rows) - 1
        if action == "cell" and body > 0:
            row = rows[draw(st.integers(1, body))]
            if row:
                row[draw(st.integers(0, len(row) - 1))] = draw(st.sampled_from(CELLS))
        elif action == "drop-row" and body > 1:
            del rows[draw(st.integers(1, body))]
        elif action == "swap" and body > 2:
            i, j = draw(st.integers(1, body)), draw(st.integers(1, body))
            rows[i], rows[j] = rows[j], rows[i]
        elif action == "drop-column" and rows and rows[0]:
            col = draw(st.integers(0, len(rows[0]) - 1))
            rows = [r[:col] + r[col + 1 :] for r in rows]
        elif action == "no-header" and rows:
            rows = rows[1:]
        elif action == "header-only":
            rows = rows[:1]
        elif action == "extra-cell" and body > 0:
            rows[draw(st.integers(1, body))].append("7")
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return draw(damaged_bytes(buffer.getvalue(), "csv"))


@st.composite
def trace_case(draw: st.DrawFn) -> tuple[str, str, str, int]:
    trace = draw(st.sampled_from(sorted(TRACE_FILES)))
    file = draw(st.sampled_from(TRACE_FILES[trace]))
    gzip_damage = draw(st.sampled_from(["none", "none", "none", "none", "truncate", "plain"]))
    return trace, file, gzip_damage, draw(st.integers(0, 2**32))


@fuzz_settings(200)
@given(case=trace_case(), data=st.data())
def test_fuzz_trace_files(
    counts: dict[str, int],
    work: Path,
    sliced: Path,
    case: tuple[str, str, str, int],
    data: st.DataObject,
) -> None:
    trace, file, gzip_damage, _ = case
    SERIAL[0] += 1
    root = work / f"data{SERIAL[0]}"
    folder = file.split("/")[0]
    shutil.copytree(sliced / folder, root / folder)
    target = root / file
    if file.endswith(".gz"):
        text = gzip.decompress(target.read_bytes()).decode()
        raw = data.draw(damaged_csv(text))
        packed = gzip.compress(raw)
        if gzip_damage == "truncate":
            packed = packed[: len(packed) // 2]
        elif gzip_damage == "plain":
            packed = raw
        target.write_bytes(packed)
    else:
        target.write_bytes(data.draw(damaged_csv(target.read_text())))
    args = ["simulate", "--trace", trace, "-p", "static", "--jobs", "1", "--json"]
    if trace != "alibaba":
        args += ["--days", "0.05"]
    check(counts, f"trace-{trace}", args, env={DATA_ENV: str(root)})


# -- CLI options ---------------------------------------------------------------------------------

NUMBERS = ["0", "-1", "0.01", "1e308", "-1e308", "nan", "inf", "-inf", "abc", "", "1e-300", "3"]


@st.composite
def simulate_options(draw: st.DrawFn, work: Path) -> list[str]:
    trace = draw(
        st.sampled_from(
            [
                "philly",
                "helios",
                "dlrm",
                "alibaba",
                "kueue-generator",
                "nosuch",
                "",
                "../etc/passwd",
            ]
        )
    )
    args = [
        "simulate",
        "--trace",
        trace,
        "--jobs",
        draw(st.sampled_from(["1", "1", "0", "-3", "x"])),
    ]
    for option in draw(
        st.lists(
            st.sampled_from(
                [
                    "--days",
                    "--start-day",
                    "--seed",
                    "-o",
                    "-p",
                    "--instance-type",
                    "--job-kind",
                    "--out",
                ]
            ),
            max_size=3,
        )
    ):
        if option in ("--days", "--start-day"):
            args += [option, draw(st.sampled_from(NUMBERS))]
        elif option == "--seed":
            args += [option, draw(st.sampled_from(["-1", "0", str(2**70), "x"]))]
        elif option == "-o":
            key = draw(
                st.sampled_from(
                    [
                        "teams",
                        "gpus_per_node",
                        "nodes",
                        "cohorts",
                        "node_cpus",
                        "resolution_minutes",
                        "jobs",
                        "end_order",
                        "x",
                        "",
                        "=",
                    ]
                )
            )
            value = draw(
                st.sampled_from(
                    [
                        "0",
                        "-1",
                        "1e9",
                        "[1, 2]",
                        "{a: 1}",
                        "'x'",
                        ".nan",
                        "fifo",
                        "synthesized",
                        "3",
                        ":",
                        "[[[",
                    ]
                )
            )
            args += [option, f"{key}={value}"]
        elif option == "-p":
            args += [option, draw(st.sampled_from(["static", "nosuch", ""]))]
        elif option == "--instance-type":
            args += [option, draw(st.sampled_from(["p4d.24xlarge", "zz.large", "", "m5.large"]))]
        elif option == "--job-kind":
            args += [option, draw(st.sampled_from(["training", "weird", ""]))]
        else:
            existing = work / "existing-file"
            existing.write_text("x")
            args += [
                option,
                draw(
                    st.sampled_from([str(existing), "/proc/nonexistent/x", str(existing / "below")])
                ),
            ]
    if "-p" not in args:
        args += ["-p", "static"]  # one policy: the default seven take long, and are not hostile
    if trace == "kueue-generator":
        args += ["-o", "cohorts=1"]
    if "--days" not in args and trace in ("philly", "helios", "dlrm"):
        args += ["--days", "0.05"]
    return args


@fuzz_settings(60)
@given(data=st.data())
def test_fuzz_simulate_options(
    counts: dict[str, int], work: Path, sliced: Path, data: st.DataObject
) -> None:
    args = data.draw(simulate_options(work))
    check(counts, "options-simulate", args, env={DATA_ENV: str(sliced)})


@fuzz_settings(40)
@given(
    args=st.one_of(
        st.tuples(
            st.just("scenario"),
            st.just("run"),
            st.sampled_from(
                ["nosuch", "", "/dev/null", "/proc", "hyperpod-walkthrough", "--json", "--all"]
            ),
        ).map(list),
        st.tuples(
            st.just("policy"),
            st.sampled_from(["validate", "import"]),
            st.sampled_from(["kueue", "hyperpod", "other", "", "/dev/null"]),
            st.sampled_from(["/dev/null", "/nonexistent", str(FIXTURES), "--x"]),
        ).map(list),
        st.tuples(
            st.just("plan"),
            st.sampled_from(["--pools", "--pending", "--nodes"]),
            st.sampled_from(["/dev/null", "/nonexistent", str(FIXTURES), ""]),
        ).map(list),
        st.tuples(
            st.just("policy"),
            st.just("import"),
            st.just("hyperpod"),
            st.just(str(FIXTURES / "hyperpod_walkthrough.json")),
            st.just("--borrow-limit-reading"),
            st.sampled_from(["", "x", "IDLE"]),
        ).map(list),
    )
)
def test_fuzz_command_options(counts: dict[str, int], args: list[str]) -> None:
    if args[-1] == "--all":
        args = [*args[:-1], "nosuch"]  # every bundled scenario would take long; not hostile
    check(counts, "options-commands", args)
