"""Request-rate series for inference services: a CSV file of samples, or a demand curve
from the DLRM trace.

The DLRM trace records instances, not requests. Its curve here is an **assumption**: every
live instance (of one application, or all; HN, CN or both roles) was sized to serve
``rps_per_instance`` requests per second, so the request rate at a time is the live count
times that. It keeps the trace's shape (when demand rose and fell, and by how much), not
any real request rate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fleetshare.inference.spec import CsvTrafficSpec, DlrmTrafficSpec
from fleetshare.inference.traffic import Traffic, from_samples
from fleetshare.inputs import InputError, read_text
from fleetshare.traces.common import DAY, cell, csv_rows, data_root, require, step_curve
from fleetshare.traces.dlrm import FILE, SECTION, read_instances, trace_end


def from_csv(spec: CsvTrafficSpec, base: Path) -> Traffic:
    """Samples ``time_column`` (seconds, increasing) and ``rate_column`` (requests per second)
    of a CSV file; each rate holds until the next time."""
    path = base / spec.csv
    source = str(path)
    rows = csv_rows(source, read_text(path), (spec.time_column, spec.rate_column))
    times = [cell(source, row, spec.time_column) for row in rows]
    rates = [cell(source, row, spec.rate_column) for row in rows]
    for (number, _), before, after in zip(rows[1:], times, times[1:], strict=False):
        if after <= before:
            raise InputError(source, f"row {number}: {spec.time_column} must increase")
    if spec.end_seconds is not None and spec.end_seconds <= times[-1]:
        raise InputError(source, f"end_seconds {spec.end_seconds:g} is not after the last time")
    return from_samples(times, rates, spec.end_seconds, source)


def from_dlrm(spec: DlrmTrafficSpec, data_dir: str | Path | None = None) -> tuple[Traffic, str]:
    """The DLRM demand curve (see the module docstring) sampled every ``step_seconds`` over
    the window, starting at 0; and the assumption, in words."""
    path = require(data_root(data_dir) / FILE, SECTION)
    instances = read_instances(path)
    end = trace_end(instances)
    chosen = [
        i
        for i in instances
        if (spec.app is None or i.app == spec.app) and (spec.role == "all" or i.role == spec.role)
    ]
    if not chosen:
        raise ValueError(f"dlrm: no {spec.role} instance of app {spec.app!r} in the trace")
    lo = spec.start_day * DAY
    hi = min(end, lo + spec.days * DAY)
    if hi <= lo:
        raise ValueError(f"dlrm: start_day {spec.start_day:g} is past the trace's end")
    starts = np.array([i.creation if i.creation is not None else 0.0 for i in chosen])
    stops = np.array([i.deletion if i.deletion is not None else end for i in chosen])
    curve = step_curve(starts, stops, np.ones(len(chosen)), end, "instances")
    grid = np.arange(lo, hi, spec.step_seconds)
    rates = curve.at(grid) * spec.rps_per_instance
    times = [float(t - lo) for t in grid]
    who = f"app {spec.app}" if spec.app is not None else "all apps"
    note = (
        f"traffic from the DLRM trace ({who}, role {spec.role}, days {spec.start_day:g} to "
        f"{hi / DAY:.2f}): live instances x {spec.rps_per_instance:g} rps, an assumption (the "
        "trace records instances, not requests)"
    )
    return Traffic(tuple(times), tuple(float(r) for r in rates), hi - lo, "dlrm"), note
