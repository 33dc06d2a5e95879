"""Sweeps: policies x parameters x seeds over one trace, in a process pool or on Ray.

A *point* is one policy variant (:mod:`~fleetshare.simulate.variants`), one value for each
swept parameter, and one seed (of the trace and the simulated cloud). Parameters change the
variant's policy after the variant has made it:

- ``borrow_limit`` -- every team's borrow limit: ``50%`` (of the idle capacity), a number
  (an absolute amount of every resource), or ``none`` (no limit);
- ``min_runtime`` -- ``cluster.preemption.min_runtime_seconds`` (no preemption of work
  younger than this);
- ``fair_share_weight.TEAM`` -- that team's fair-share weight.

Each point runs alone (it loads its trace itself, so a Ray worker needs nothing but the
package) and returns one row of cluster metrics and one row per team; :func:`run_sweep`
collects them in the order of the points, whatever order they finished in.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from fleetshare.model.catalog import Catalog
from fleetshare.simulate.variants import VARIANTS, Variant, select

PARAMETERS = ("borrow_limit", "min_runtime", "fair_share_weight.TEAM")
"""The parameters a sweep may vary (see the module docstring)."""

Row = dict[str, Any]


@dataclass(frozen=True)
class Point:
    """One run of a sweep."""

    policy: str
    params: tuple[tuple[str, Any], ...]
    seed: int

    def label(self) -> str:
        """E.g. ``fair-share borrow_limit=50% seed=1``."""
        shown = " ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.policy} {shown} seed={self.seed}".replace("  ", " ")


def check_parameter(name: str) -> None:
    """Raise ValueError unless ``name`` is a parameter a sweep may vary."""
    if name in ("borrow_limit", "min_runtime"):
        return
    if name.startswith("fair_share_weight.") and len(name) > len("fair_share_weight."):
        return
    raise ValueError(f"unknown sweep parameter {name!r}; known: {', '.join(PARAMETERS)}")


def points(
    policies: Sequence[str], grid: Mapping[str, Sequence[Any]], seeds: Sequence[int]
) -> list[Point]:
    """Every combination, policies outermost, then the parameters in the order given, then
    seeds."""
    select(policies)  # unknown names raise
    for name, values in grid.items():
        check_parameter(name)
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            # a string is a sequence of characters: '600' once swept 6, 0 and 0
            raise ValueError(
                f"sweep parameter {name}: give a list of values, got {type(values).__name__} "
                f"{values!r}"
            )
        if not values:
            raise ValueError(f"sweep parameter {name}: give at least one value")
        for value in values:
            check_value(name, value)
    if not seeds:
        raise ValueError("give at least one seed")
    names = list(grid)
    out = []
    for policy in dict.fromkeys(policies):
        for combo in itertools.product(*(grid[n] for n in names)):
            for seed in dict.fromkeys(seeds):
                out.append(Point(policy, tuple(zip(names, combo, strict=True)), seed))
    return out


def check_value(name: str, value: Any) -> None:
    """Raise ValueError naming the parameter and the field unless ``value`` gives a valid
    policy (the policy schema's rules, checked before any run starts)."""
    from fleetshare.policy.errors import PolicyError
    from fleetshare.policy.schema import load_policy

    team = name.split(".", 1)[1] if name.startswith("fair_share_weight.") else "team"
    try:
        load_policy(apply({"teams": [{"name": team}]}, [(name, value)]))
    except PolicyError as exc:
        why = "; ".join(f"{path.rsplit('.', 1)[-1]}: {reason}" for path, reason in exc.problems)
        raise ValueError(f"sweep parameter {name}={value}: {why}") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"sweep parameter {name}={value}: {exc}") from None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (ValueError, TypeError):
        raise ValueError(f"want a number, got {value!r}") from None


def _borrow_limits(value: Any) -> list[dict[str, Any]]:
    text = str(value).strip()
    if text.lower() in ("none", "null", ""):
        return []
    if text.endswith("%"):
        try:
            return [{"percent_of_idle": float(text[:-1])}]
        except ValueError:
            raise ValueError(f"want a percentage such as 50%, got {text!r}") from None
    return [{"absolute": value}]


def apply(policy: dict[str, Any], params: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The policy (fleetshare's format, a dict) with the parameters set (a new dict)."""
    out = dict(policy)
    teams = [dict(t) for t in out.get("teams", [])]
    cluster = dict(out.get("cluster") or {})
    for name, value in params:
        if name == "borrow_limit":
            for team in teams:
                team["borrow_limits"] = _borrow_limits(value)
        elif name == "min_runtime":
            cluster["preemption"] = {**(cluster.get("preemption") or {})}
            cluster["preemption"]["min_runtime_seconds"] = _number(value)
        else:
            check_parameter(name)
            wanted = name.split(".", 1)[1]
            found = [t for t in teams if t.get("name") == wanted]
            if not found:
                known = ", ".join(str(t.get("name")) for t in teams)
                raise ValueError(f"{name}: no team {wanted!r}; teams: {known}")
            found[0]["fair_share_weight"] = _number(value)
    out["teams"] = teams
    out["cluster"] = cluster
    return out


@dataclass(frozen=True)
class SweptVariant(Variant):
    """A variant whose policy has the point's parameters set."""

    params: tuple[tuple[str, Any], ...] = ()

    def policy(self, base: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
        """The variant's policy, then the parameters."""
        return apply(super().policy(base, catalog), self.params)


def flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Scalars of nested mappings, keys joined by ``_`` (lists left out)."""
    for key, value in data.items():
        if isinstance(value, Mapping):
            yield from flatten(value, f"{prefix}{key}_")
        elif not isinstance(value, list | tuple):
            yield f"{prefix}{key}", value


def run_point(trace: str, options: Mapping[str, Any], point: Point) -> tuple[Row, list[Row]]:
    """Run one point: (its cluster row, its team rows), each starting with the point's
    policy, parameters and seed."""
    from fleetshare.simulate.run import from_trace, run_variant

    base = VARIANTS[point.policy]
    variant = SweptVariant(
        base.name,
        base.description,
        base.sharing,
        base.fair_share,
        base.autoscale,
        base.placement,
        point.params,
    )
    inp = from_trace(trace, dict(options), seed=point.seed)
    result = run_variant(inp, variant).to_json()
    key: Row = {"policy": point.policy, **dict(point.params), "seed": point.seed}
    cluster = {**key, **dict(flatten(result["cluster"]))}
    teams = [{**key, "team": name, **dict(flatten(row))} for name, row in result["teams"].items()]
    return cluster, teams


Done = Callable[[Point], None]
"""Called as each point finishes."""


def run_sweep(
    trace: str,
    options: Mapping[str, Any],
    sweep: Sequence[Point],
    *,
    jobs: int = 1,
    ray_address: str | None = None,
    done: Done | None = None,
) -> tuple[list[Row], list[Row]]:
    """Run every point (``jobs`` worker processes, or the Ray cluster at ``ray_address``,
    ``"local"`` for a fresh one on this machine); (cluster rows, team rows) in point order."""
    if ray_address is not None:
        results = _on_ray(trace, options, sweep, ray_address, done)
    elif jobs <= 1:
        results = []
        for point in sweep:
            results.append(run_point(trace, options, point))
            if done is not None:
                done(point)
    else:
        results = _in_processes(trace, options, sweep, jobs, done)
    return [c for c, _ in results], [t for _, teams in results for t in teams]


def _in_processes(
    trace: str, options: Mapping[str, Any], sweep: Sequence[Point], jobs: int, done: Done | None
) -> list[tuple[Row, list[Row]]]:
    out: dict[int, tuple[Row, list[Row]]] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_point, trace, options, p): i for i, p in enumerate(sweep)}
        for future in as_completed(futures):
            i = futures[future]
            out[i] = future.result()
            if done is not None:
                done(sweep[i])
    return [out[i] for i in range(len(sweep))]


RAY_CONNECT_SECONDS = 10.0
"""How long ``--ray HOST:PORT`` waits for the cluster's port to answer (Ray itself retries an
unreachable address for minutes)."""


def check_reachable(address: str, timeout: float = RAY_CONNECT_SECONDS) -> None:
    """Raise ValueError, within ``timeout``, unless something listens at a Ray address
    (``host:port`` or ``ray://host:port``; ``local`` and ``auto`` are not network addresses)."""
    if address in ("local", "auto"):
        return
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--ray {address}: give host:port, ray://host:port, local or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(
            f"--ray {address}: no Ray cluster answers there ({reason}; waited at most "
            f"{timeout:g} s)"
        ) from None


def _on_ray(
    trace: str, options: Mapping[str, Any], sweep: Sequence[Point], address: str, done: Done | None
) -> list[tuple[Row, list[Row]]]:
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'fleetshare[ray]'") from None
    started = not ray.is_initialized()
    if started:
        check_reachable(address)
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(run_point)
        refs = [task.remote(trace, dict(options), p) for p in sweep]
        index = {ref: i for i, ref in enumerate(refs)}
        out: dict[int, tuple[Row, list[Row]]] = {}
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                out[index[ref]] = ray.get(ref)
                if done is not None:
                    done(sweep[index[ref]])
        return [out[i] for i in range(len(sweep))]
    finally:
        if started:
            ray.shutdown()
