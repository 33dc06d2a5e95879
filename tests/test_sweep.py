"""Sweeps (points, parameters, process pool, Ray, Parquet) and the notebook API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

import fleetshare
from fleetshare.cli import app
from fleetshare.simulate.sweep import apply, points, run_sweep

# a quarter of a day of Helios Earth from day 14: a few hundred jobs, 16 teams, seconds to run
TRACE = "helios"
WINDOW: dict[str, Any] = {"start_day": 14, "days": 0.25}


def test_points_are_every_combination_in_a_stable_order() -> None:
    grid = points(["idle50", "static"], {"borrow_limit": ["50%", 8], "min_runtime": [0]}, [1, 0])
    assert [p.label() for p in grid] == [
        "idle50 borrow_limit=50% min_runtime=0 seed=1",
        "idle50 borrow_limit=50% min_runtime=0 seed=0",
        "idle50 borrow_limit=8 min_runtime=0 seed=1",
        "idle50 borrow_limit=8 min_runtime=0 seed=0",
        "static borrow_limit=50% min_runtime=0 seed=1",
        "static borrow_limit=50% min_runtime=0 seed=0",
        "static borrow_limit=8 min_runtime=0 seed=1",
        "static borrow_limit=8 min_runtime=0 seed=0",
    ]
    with pytest.raises(ValueError, match="unknown sweep parameter 'borrow'"):
        points(["idle50"], {"borrow": [1]}, [0])
    with pytest.raises(ValueError, match="unknown policy"):
        points(["nope"], {}, [0])
    with pytest.raises(ValueError, match="at least one value"):
        points(["idle50"], {"min_runtime": []}, [0])
    # a string is not a list of values (it once swept min_runtime 6, 0 and 0)
    with pytest.raises(ValueError, match="min_runtime: give a list of values, got str '600'"):
        points(["idle50"], {"min_runtime": "600"}, [0])  # type: ignore[dict-item]


def test_parameters_change_the_policy() -> None:
    base = {"teams": [{"name": "a", "borrow_limits": [{"absolute": 1}]}, {"name": "b"}]}
    out = apply(base, [("borrow_limit", "25%"), ("min_runtime", 300), ("fair_share_weight.b", 3)])
    assert out["teams"][0]["borrow_limits"] == [{"percent_of_idle": 25.0}]
    assert out["teams"][1]["borrow_limits"] == [{"percent_of_idle": 25.0}]
    assert out["teams"][1]["fair_share_weight"] == 3.0
    assert "fair_share_weight" not in out["teams"][0]
    assert out["cluster"]["preemption"]["min_runtime_seconds"] == 300.0
    assert apply(base, [("borrow_limit", 4)])["teams"][0]["borrow_limits"] == [{"absolute": 4}]
    assert apply(base, [("borrow_limit", "none")])["teams"][0]["borrow_limits"] == []
    assert base["teams"][0]["borrow_limits"] == [{"absolute": 1}]  # the input is not changed
    with pytest.raises(ValueError, match="no team 'c'; teams: a, b"):
        apply(base, [("fair_share_weight.c", 2)])


@pytest.fixture(scope="module")
def swept() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    grid = points(["fair-share"], {"borrow_limit": [0, "none"]}, [0])
    return run_sweep(TRACE, WINDOW, grid, jobs=2)


def test_a_sweep_in_a_process_pool_measures_each_parameter_value(
    swept: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    runs, teams = swept
    assert [(r["policy"], r["borrow_limit"], r["seed"]) for r in runs] == [
        ("fair-share", 0, 0),
        ("fair-share", "none", 0),
    ]
    no_borrowing, unlimited = runs
    assert no_borrowing["borrowed_hours"] == 0  # a borrow limit of 0 binds
    assert unlimited["borrowed_hours"] > 0
    assert unlimited["queue_wait_seconds_p95"] <= no_borrowing["queue_wait_seconds_p95"]
    # one row per run and team, the teams' use adding up to the run's
    for run in runs:
        mine = [t for t in teams if t["borrow_limit"] == run["borrow_limit"]]
        assert len(mine) == 16
        assert sum(t["used_hours"] for t in mine) == pytest.approx(run["used_hours"], abs=0.01)


def test_the_command_writes_parquet_that_reads_back(
    tmp_path: Path, swept: tuple[list[dict[str, Any]], list[dict[str, Any]]]
) -> None:
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        app,
        [
            "sweep",
            "--trace",
            TRACE,
            "--start-day",
            "14",
            "--days",
            "0.25",
            "-p",
            "fair-share",
            "--param",
            "borrow_limit=0,none",
            "--jobs",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    runs = pd.read_parquet(out / "runs.parquet")
    teams = pd.read_parquet(out / "teams.parquet")
    assert list(runs["borrow_limit"]) == ["0", "none"]  # mixed values are written as text
    assert list(runs["borrowed_hours"]) == [r["borrowed_hours"] for r in swept[0]]
    assert len(teams) == 32
    bad = CliRunner().invoke(
        app, ["sweep", "--trace", TRACE, "-p", "static", "--param", "weight=1", "--out", str(out)]
    )
    assert bad.exit_code == 2 and "unknown sweep parameter 'weight'" in bad.output


@pytest.mark.slow
def test_a_sweep_on_a_local_ray_instance_gives_the_same_rows(
    swept: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    pytest.importorskip("ray")
    result = fleetshare.sweep(
        TRACE,
        policies=["fair-share"],
        params={"borrow_limit": [0, "none"]},
        ray_address="local",
        **WINDOW,
    )
    expected = swept[0]
    assert list(result.runs["borrow_limit"]) == ["0", "none"]
    for column in ("borrowed_hours", "used_hours", "queue_wait_seconds_p95", "cost_usd"):
        assert list(result.runs[column]) == [r[column] for r in expected]
    assert len(result.teams) == 32


def test_simulate_returns_frames_per_policy_team_and_job() -> None:
    sim = fleetshare.simulate(TRACE, policies=["static", "fair-share"], **WINDOW)
    assert list(sim.policies.index) == ["static", "fair-share"]
    assert sim.policies.loc["static", "borrowed_hours"] == 0
    assert sim.policies.loc["fair-share", "borrowed_hours"] > 0
    assert sim.teams.index.names == ["policy", "team"]
    assert len(sim.teams) == 2 * 16
    jobs = sim.jobs
    per_policy = jobs.groupby("policy").size()
    assert (
        per_policy["static"] == per_policy["fair-share"] == sim.policies.loc["static", "workloads"]
    )
    # the job frame agrees with the policy frame it came from
    static = jobs[jobs["policy"] == "static"]
    assert static["never_admitted"].sum() == sim.policies.loc["static", "never_admitted"]
    if not static["never_admitted"].any():
        mean = sim.policies.loc["static", "first_wait_seconds_mean"]
        assert static["first_wait_s"].mean() == pytest.approx(mean, abs=1e-3)
    assert json.dumps(sim.input["facts"])  # plain data
    with pytest.raises(ValueError, match="give a trace or a scenario"):
        fleetshare.simulate()


def test_errors_raised_in_a_worker_process_reach_the_caller() -> None:
    """Exceptions are pickled back from a worker: one that does not unpickle breaks the pool
    (``BrokenProcessPool``) and hides the message."""
    import pickle

    from fleetshare.inputs import InputError
    from fleetshare.policy.errors import PolicyError

    policy = PolicyError([("teams[0](a).fair_share_weight", "must be >= 0")], "variant policy")
    back = pickle.loads(pickle.dumps(policy))
    assert str(back) == str(policy) and back.problems == policy.problems
    bad_input = InputError("trace.csv", "row 3: not a number")
    back_input = pickle.loads(pickle.dumps(bad_input))
    assert str(back_input) == "trace.csv: row 3: not a number" and back_input.why == bad_input.why


def test_an_unreachable_ray_address_is_refused_at_once() -> None:
    """``--ray`` to an address where nothing listens once waited for minutes (Ray retries);
    it is refused, naming the address, before any run. Loopback only."""
    import socket

    from fleetshare.simulate.sweep import check_reachable

    with socket.socket() as probe:  # a port nothing listens on: bind it, never listen
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        with pytest.raises(ValueError, match=rf"--ray 127.0.0.1:{port}: no Ray cluster answers"):
            check_reachable(f"127.0.0.1:{port}", timeout=5)
    with pytest.raises(ValueError, match="give host:port"):
        check_reachable("nowhere")
    with socket.socket() as server:  # something listening passes
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"ray://127.0.0.1:{server.getsockname()[1]}", timeout=5)
    check_reachable("local")
