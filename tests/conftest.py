"""Shared helpers: run a small scenario given as Python data and return its JSON result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing

from fleetshare.scenario.loader import Scenario, build_workloads, load_scenario_data
from fleetshare.scenario.report import to_json
from fleetshare.scenario.runner import run_scenario
from fleetshare.scenario.schema import ScenarioSpec
from fleetshare.traces.common import data_root
from tests import postgres, prometheus_server
from tests.postgres import PostgresServer

TRACE_DATA = data_root()
"""The trace data the loaders read by default (bundled in the package)."""

FUZZ_INPUTS = pytest.StashKey[dict[str, int]]()
"""Generated inputs the fuzz tests ran, per kind (``tests/test_fuzz_inputs.py``)."""


_COMMANDS: dict[int, tuple[typer.Typer, Any]] = {}


def _command_of(app: typer.Typer) -> Any:
    """The click command of ``app``, built once. typer's ``CliRunner.invoke`` builds it
    again at every call (fleetshare's: 25-60 ms, every option of every command read from its
    signature) and the tests invoke the CLI in-process thousands of times (the fuzz tests
    alone 1,400); a click command is reusable (each call gets a context of its own), and
    the tree is made from the app's registered commands, fixed once ``fleetshare.cli`` is
    imported. The app is kept so that its id is not reused."""
    hit = _COMMANDS.get(id(app))
    if hit is None:
        hit = _COMMANDS[id(app)] = (app, typer.main.get_command(app))
    return hit[1]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FUZZ_INPUTS] = {}
    typer.testing._get_command = _command_of  # type: ignore[attr-defined,assignment]


def _fuzz_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Report how many generated inputs the fuzz tests ran (and write it to the cache)."""
    counts = config.stash.get(FUZZ_INPUTS, {})
    if counts:
        total = sum(counts.values())
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        terminalreporter.write_line(f"fuzz: {total:,} generated inputs ran ({kinds})")
        cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
        if cache is not None:
            cache.set("fleetshare/fuzz_inputs", {"total": total, **counts})


def run_case(
    policy: dict[str, Any],
    nodes: list[dict[str, Any]],
    workloads: list[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    """Run a scenario built from plain data; returns the ``scenario run --json`` object."""
    data = {"name": "case", "cluster": {"nodes": nodes}, "policy": policy, "workloads": workloads}
    if "events" in extra:
        data["cluster"]["events"] = extra.pop("events")
    data.update(extra)
    return to_json(run_scenario(load_scenario_data(data, Path("."))))


def load_case(data: dict[str, Any]) -> Scenario:
    """Load a generated scenario whose workloads may name teams no policy knows.

    The loader rejects those; generated cases keep them on purpose so that the engine's own
    handling of work without a team policy (it waits) stays exercised, so they are added
    after loading, unresolved."""
    teams = {t["name"] for t in data.get("policy", {}).get("teams", [])}
    known = [w for w in data["workloads"] if w["team"] in teams]
    scenario = load_scenario_data({**data, "workloads": known}, Path("."))
    if len(known) != len(data["workloads"]):
        spec = ScenarioSpec.model_validate(data)
        scenario.workloads = build_workloads(spec, scenario.policy, resolve_teams=False)
    return scenario


@pytest.fixture
def run() -> Any:
    """The :func:`run_case` helper as a fixture."""
    return run_case


@pytest.fixture(scope="session")
def kube() -> Any:
    """A real control plane (etcd, kube-apiserver, kube-scheduler, the Job controller) for the
    whole session: see tests/kube_harness.py."""
    from tests.kube_harness import control_plane

    with control_plane() as harness:
        yield harness


@pytest.fixture
def ns(kube: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own; its nodes and the cluster-scoped policy go at the end."""
    from fleetshare.operator.kube import JOBS
    from tests.kube_harness import install_crds

    install_crds(kube)
    name = kube.new_namespace(request.node.name.removeprefix("test_").replace("_", "-")[:30])
    yield name
    kube.delete_nodes(name)
    kube.delete_cluster_objects()
    for job in kube.kube.list(JOBS, name)[0]:
        kube.kube.delete(JOBS, job["metadata"]["name"], name, propagationPolicy="Background")
    assert not kube.kubelet.errors, kube.kubelet.errors[-3:]


# -- Prometheus (a real server, started per test when installed) -------------------------------


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, prometheus_server.Counter]]:
    """A Prometheus on loopback scraping a counter the test controls
    (``tests/prometheus_server.py``); skipped, loudly, where the binary is missing."""
    if prometheus_server.binary() is None:
        pytest.skip(prometheus_server.SKIPPED)
    with prometheus_server.running(tmp_path) as running:
        yield running


# -- PostgreSQL (a real server, started once per session when installed) -----------------------

_PG_SKIPPED: list[str] = []


@pytest.fixture(scope="session")
def postgresql() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (``tests/postgres.py``); the tests that need it are
    skipped, loudly, where PostgreSQL is not installed."""
    why = postgres.unavailable()
    if why is not None:
        _PG_SKIPPED.append(why)
        pytest.skip(why)
    server = postgres.start({"fsync": "off", "synchronous_commit": "off"})
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The fuzz tests' input count; and, loudly, real servers that could not run: PostgreSQL,
    Prometheus, or the browser tests' chromium, chromedriver or selenium (a skipped real-part
    test must not pass unnoticed)."""
    _fuzz_summary(terminalreporter, config)
    if _PG_SKIPPED:
        terminalreporter.write_sep(
            "!", f"PostgreSQL tests SKIPPED: {_PG_SKIPPED[0]}", yellow=True, bold=True
        )
    reasons = set()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        if "BROWSER TESTS SKIPPED" in str(text):
            reasons.add(str(text).removeprefix("Skipped: "))
        if "PROMETHEUS TESTS SKIPPED" in str(text):
            terminalreporter.write_sep("!", str(text).removeprefix("Skipped: "), yellow=True)
    if reasons:
        terminalreporter.write_sep("!", "BROWSER TESTS SKIPPED", red=True, bold=True)
        for reason in sorted(reasons):
            terminalreporter.write_line(reason, red=True, bold=True)
        terminalreporter.write_line(
            "The dashboard was not tested in a browser. Install them (Debian: apt-get install "
            "-y chromium chromium-driver; .ci/run does) and run make test again.",
            yellow=True,
        )
