"""The Python API for notebooks: ``fleetshare.simulate(...)`` and ``fleetshare.sweep(...)``.

Both return pandas DataFrames (pandas is imported here only):

- :func:`simulate` -> :class:`Simulation`: ``policies`` (one row per policy: every cluster
  metric of ``fleetshare simulate --json``, nested ones flattened as ``queue_wait_seconds_p99``),
  ``teams`` (one row per policy and team) and ``jobs`` (one row per policy and job: team,
  GPUs, submission, first admission, first wait, when it became short of capacity);
- :func:`sweep` -> :class:`Sweep`: ``runs`` (one row per policy, parameter values and seed)
  and ``teams``; ``to_parquet(folder)`` writes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetshare.simulate.sweep import flatten, points, run_sweep

if TYPE_CHECKING:
    import pandas as pd


def frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame; a column mixing numbers and text (a parameter swept over ``50%``
    and ``8``) becomes text, so that it can be written to Parquet."""
    import pandas as pd

    out = pd.DataFrame(list(rows))
    for column in out.columns:
        if out[column].dtype == object:
            kinds = {type(v) for v in out[column] if v is not None}
            if len(kinds) > 1 and str in kinds:
                out[column] = out[column].map(lambda v: None if v is None else str(v))
    return out


@dataclass
class Simulation:
    """What :func:`simulate` returns."""

    policies: pd.DataFrame
    teams: pd.DataFrame
    jobs: pd.DataFrame
    input: dict[str, Any]
    """The input's name, assumptions and facts."""


@dataclass
class Sweep:
    """What :func:`sweep` returns."""

    runs: pd.DataFrame
    teams: pd.DataFrame

    def to_parquet(self, folder: str | Path) -> list[Path]:
        """Write ``runs.parquet`` and ``teams.parquet`` into ``folder`` (made if missing)."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "runs.parquet", out / "teams.parquet"]
        self.runs.to_parquet(paths[0], index=False)
        self.teams.to_parquet(paths[1], index=False)
        return paths


def simulate(
    trace: str | None = None,
    *,
    scenario: str | Path | None = None,
    policies: Sequence[str] | None = None,
    days: float | None = None,
    start_day: float | None = None,
    options: Mapping[str, Any] | None = None,
    seed: int | None = None,
    warm_capacity: Mapping[str, Any] | None = None,
    warm_history_days: float = 7.0,
    jobs: int = 1,
) -> Simulation:
    """Run ``policies`` (default: the showcase's) on a ``trace`` (``helios``, ``philly``, ...,
    with ``days``, ``start_day`` and loader ``options``) or a ``scenario`` file, as
    ``fleetshare simulate`` does; ``warm_capacity`` (a mapping of
    :class:`~fleetshare.autoscaling.warm.WarmCapacity` fields) keeps warm capacity ahead of
    forecast demand in ``-autoscale`` runs of a trace."""
    import pandas as pd

    from fleetshare.autoscaling.warm import WarmCapacity
    from fleetshare.simulate.run import demand_before, from_scenario, from_trace, run_variants
    from fleetshare.simulate.showcase import DEFAULT_POLICIES
    from fleetshare.simulate.variants import select

    if (trace is None) == (scenario is None):
        raise ValueError("give a trace or a scenario")
    chosen = select(list(policies or DEFAULT_POLICIES))
    if scenario is not None:
        inp = from_scenario(Path(scenario), seed=seed)
    else:
        assert trace is not None
        opts = dict(options or {})
        if days is not None:
            opts["days"] = days
        if start_day is not None:
            opts["start_day"] = start_day
        inp = from_trace(trace, opts, seed=seed)
        if warm_capacity is not None:
            setting = WarmCapacity.model_validate(dict(warm_capacity))
            if "history" not in warm_capacity and warm_history_days > 0:
                history = demand_before(trace, opts, warm_history_days, setting.resource)
                setting = setting.model_copy(update={"history": history})
            inp.warm_capacity = setting
    if not inp.nodes:
        chosen = [v for v in chosen if v.autoscale]
    results = run_variants(inp, chosen, jobs=jobs)
    policy_rows = []
    team_rows = []
    job_frames = []
    for result in results:
        data = result.to_json()
        policy_rows.append({"policy": result.name, **dict(flatten(data["cluster"]))})
        for team, row in data["teams"].items():
            team_rows.append({"policy": result.name, "team": team, **dict(flatten(row))})
        m = result.measured
        first_wait = m.first_admit - m.submit
        job_frames.append(
            pd.DataFrame(
                {
                    "policy": result.name,
                    "job": m.names,
                    "team": [m.team_names[k] for k in m.wait_team],
                    m.resource: m.amount,
                    "submit_s": m.submit,
                    "first_admitted_s": m.first_admit,
                    "first_wait_s": first_wait,
                    "short_of_capacity_s": m.short_since,
                    "never_admitted": np.isnan(m.first_admit),
                }
            )
        )
    return Simulation(
        policies=pd.DataFrame(policy_rows).set_index("policy"),
        teams=pd.DataFrame(team_rows).set_index(["policy", "team"]),
        jobs=pd.concat(job_frames, ignore_index=True),
        input={"name": inp.name, "assumptions": inp.assumptions, "facts": inp.facts},
    )


def sweep(
    trace: str,
    *,
    policies: Sequence[str],
    params: Mapping[str, Sequence[Any]] | None = None,
    seeds: Sequence[int] = (0,),
    days: float | None = None,
    start_day: float | None = None,
    options: Mapping[str, Any] | None = None,
    jobs: int = 1,
    ray_address: str | None = None,
) -> Sweep:
    """Run ``policies`` x ``params`` (name -> values, see :mod:`fleetshare.simulate.sweep`) x
    ``seeds`` on a trace, ``jobs`` at a time in processes or on the Ray cluster at
    ``ray_address`` (``"local"``: a fresh one on this machine)."""
    opts = dict(options or {})
    if days is not None:
        opts["days"] = days
    if start_day is not None:
        opts["start_day"] = start_day
    grid = points(policies, dict(params or {}), seeds)
    runs, teams = run_sweep(trace, opts, grid, jobs=jobs, ray_address=ray_address)
    return Sweep(runs=frame(runs), teams=frame(teams))
