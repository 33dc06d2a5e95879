"""Trace loaders for simulation: real cluster traces and Kueue's synthetic benchmark.

``load_trace(name, **options)`` returns a :class:`~fleetshare.traces.common.Trace` -- nodes,
workloads with submit times and durations, teams with quotas (a policy dict), demand curves
and the loader's assumptions. ``TRACES`` lists the names with one-line descriptions; each
loader's module docstring (and ``docs/traces.md``) gives its rules and options.

Data files ship inside the package (``fleetshare/data/traces``; ``$FLEETSHARE_DATA`` or
``data_dir=``); a missing file raises FileNotFoundError naming it and its README section.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from fleetshare.inputs import MAX_COUNT
from fleetshare.traces import alibaba, dlrm, helios, kueue_generator, philly
from fleetshare.traces.common import DemandCurve, Trace, data_root, jobs_from_counts

__all__ = [
    "TRACES",
    "DemandCurve",
    "Trace",
    "data_root",
    "jobs_from_counts",
    "load_trace",
    "trace_options",
]

TRACES: dict[str, str] = {
    "alibaba": "Alibaba GPU cluster 2023: 8,152 pods (fractional GPUs, GPU models, QoS) on "
    "1,213 nodes / 6,212 GPUs over 149 days; teams by seeded hash",
    "helios": "Helios Earth, May 2020: 16 teams' per-minute GPU demand as synthetic 8- and "
    "1-GPU jobs; daily VC quotas (856 GPUs)",
    "philly": "Microsoft Philly, Oct-Dec 2017: per-minute active nodes (of 420) as whole-node "
    "jobs, for scale-down/scale-up studies",
    "dlrm": "Alibaba DLRM inference, 31 days: 23,871 GPU and CPU instances of 156 apps, "
    "for autoscaling",
    "kueue-generator": "Kueue's scheduler benchmark: 5 cohorts x 6 queues, 15,000 small/"
    "medium/large CPU workloads (synthetic)",
}

_LOADERS: dict[str, Callable[..., Trace]] = {
    "alibaba": alibaba.load,
    "helios": helios.load,
    "philly": philly.load,
    "dlrm": dlrm.load,
    "kueue-generator": kueue_generator.load,
}


def trace_options(name: str) -> dict[str, Any]:
    """A loader's options and their defaults."""
    loader = _loader(name)
    return {
        p.name: p.default
        for p in inspect.signature(loader).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def _loader(name: str) -> Callable[..., Trace]:
    try:
        return _LOADERS[name]
    except KeyError:
        raise ValueError(f"unknown trace {name!r}; known: {', '.join(TRACES)}") from None


def load_trace(name: str, **options: Any) -> Trace:
    """Load trace ``name`` with the loader's keyword ``options`` (see :data:`TRACES`)."""
    loader = _loader(name)
    known = trace_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(
            f"trace {name!r} has no option {', '.join(unknown)}; options: "
            + ", ".join(f"{k}={v!r}" for k, v in known.items())
        )
    return loader(**_typed(name, loader, options))


def _typed(name: str, loader: Callable[..., Trace], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as the loader's parameters are typed (``"3"`` may be 3; ``"1e9"``, a list
    or ``.nan`` for a number are errors naming the option); whole numbers at most
    :data:`~fleetshare.inputs.MAX_COUNT`, numbers finite."""
    hints = typing.get_type_hints(loader)
    out = {}
    for key, value in options.items():
        hint = hints.get(key)
        if hint is None:
            out[key] = value
            continue
        try:
            typed = TypeAdapter(hint, config=ConfigDict(allow_inf_nan=False)).validate_python(value)
        except ValidationError as exc:
            why = exc.errors()[0]["msg"]
            raise ValueError(f"trace {name!r} option {key}: {why} (got {value!r})") from None
        if isinstance(typed, int) and not isinstance(typed, bool) and abs(typed) > MAX_COUNT:
            raise ValueError(
                f"trace {name!r} option {key}: {typed:,} is more than {MAX_COUNT:,}, the most "
                "fleetshare accepts"
            )
        out[key] = typed
    return out
