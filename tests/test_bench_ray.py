"""bench/ray_autoscaler.py: its checker and fleetshare side without Ray; one mix with Ray.

Ray comes with the dev extras (``pip install -e '.[dev]'``); the Ray comparison is skipped
only where it is not installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fleetshare.model.catalog import load_catalog

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "ray_autoscaler.py"
GIB = 2**30


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    if str(SCRIPT.parent) not in sys.path:  # as when run as a script: its helpers beside it
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_ray_autoscaler", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_exact_check_places_what_first_fit_misses(bench: ModuleType) -> None:
    # two nodes of 10 CPUs, pods 4, 4, 3, 3, 3, 3: first-fit decreasing puts both 4s on one
    # node, three 3s on the other, and the last 3 is stuck; 4+3+3 | 4+3+3 holds them all
    nodes = [(10, GIB, 0, None), (10, GIB, 0, None)]
    pods = [(4, 1, 0, None)] * 2 + [(3, 1, 0, None)] * 4
    left, how = bench.first_fit(nodes, pods)
    assert left == 1
    left, how = bench.verify(nodes, pods)
    assert (left, how) == (0, "exact (MILP optimum)")
    assert bench.verify(nodes, [*pods, (1, 1, 0, None)])[0] == 1


def test_check_respects_gpu_model(bench: ModuleType) -> None:
    nodes = [(8000, 64 * GIB, 1, "t4")]
    assert bench.verify(nodes, [(1000, GIB, 1, "a100")])[0] == 1
    assert bench.verify(nodes, [(1000, GIB, 1, "t4")])[0] == 0
    assert bench.verify(nodes, [(1000, GIB, 1, None)])[0] == 0


def test_fleetshare_places_every_mix(bench: ModuleType) -> None:
    catalog = load_catalog()
    types = bench.instance_set(catalog)
    assert {t.family for t in types} == set(bench.FAMILIES)
    for mix in bench.build_mixes(0):
        assert 50 <= mix.pods <= 500
        row = bench.measure_mix(mix, catalog, types, [], 1, None)
        ours = row["fleetshare"]
        assert ours["assignment_problems"] == [], mix.name
        assert ours["unplaced"] == 0 and ours["verified_unplaced"] == 0, mix.name
        assert ours["lower_bound"] <= ours["hourly_cost"] + 1e-6


def test_against_ray_on_one_mix(bench: ModuleType) -> None:
    pytest.importorskip("ray", reason="ray comes with the dev extras (pip install -e '.[dev]')")
    catalog = load_catalog()
    types = bench.instance_set(catalog)
    mix = next(m for m in bench.build_mixes(0) if m.name == "odd-shapes")
    rays = [bench.RayV1(types, False), bench.RayV2(types, True)]
    row = bench.measure_mix(mix, catalog, types, rays, 1, None)
    for ray in rays:
        assert row[ray.name]["hourly_cost"] > 0
        assert row[f"vs_{ray.name}"]["comparable"]
        assert row[f"vs_{ray.name}"]["never_more_expensive"]
