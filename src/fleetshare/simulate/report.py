"""Present a comparison: a rich table for the terminal, JSON, and an HTML report with charts.

The HTML page is self-contained (charts embedded as base64 PNG); the same charts are written
as PNG files next to it, with ``metrics.json``. Charts are drawn with matplotlib's Agg backend
from the step functions :mod:`fleetshare.simulate.metrics` reconstructed from the event logs;
time series are shown as exact time-weighted means over bins (the bin width is printed).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, StrMethodFormatter
from rich.table import Table

from fleetshare.model.catalog import load_catalog
from fleetshare.model.resources import GPU
from fleetshare.simulate.metrics import HOUR, FloatArray, Measured, Step
from fleetshare.simulate.run import SimulationInput, VariantResult

BINS = 720
COLORS = [f"C{i}" for i in range(10)]


def unit(resource: str) -> str:
    """``GPU`` for nvidia.com/gpu, else the resource in capitals."""
    return "GPU" if resource == GPU else resource.split("/")[-1].upper()


def duration(seconds: float | None) -> str:
    """12s, 4.5m, 3.2h, 2.1d."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def to_json(inp: SimulationInput, results: Sequence[VariantResult]) -> dict[str, Any]:
    """``{"input": {...}, "policies": {NAME: {"cluster": {...}, "teams": {...}}}, "notes":
    [...]}`` (notes: policies that came out the same, and why)."""
    return {
        "input": {
            "name": inp.name,
            "source": inp.source,
            "description": inp.description,
            "seed": inp.seed,
            "duration_hours": round(inp.duration / HOUR, 4),
            "instance_type": inp.instance_type,
            "stand_in_types": dict(inp.stand_in),
            "facts": _plain(inp.facts),
            "assumptions": inp.all_assumptions(load_catalog()),
        },
        "policies": {r.name: r.to_json() for r in results},
        "notes": coinciding(results),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


# -- terminal --------------------------------------------------------------------------------


_Cell = Callable[["VariantResult"], str]


def _columns(u: str) -> list[tuple[str, str, str, _Cell]]:
    """(header, justify, table, cell) of every comparison column; ``table`` is ``outcome``,
    ``cost`` (the two tables that each fit 120 columns) or ``under`` (under-provisioning,
    autoscaled runs only: a table of their own)."""

    def wait(key: str) -> _Cell:
        return lambda r: duration(r.cluster["queue_wait_seconds"][key])

    return [
        ("useful\nalloc", "right", "outcome", lambda r: _fixed_share(r, "useful_allocation")),
        ("paid\nutil", "right", "outcome", lambda r: f"{r.cluster['utilisation_of_paid']:.1%}"),
        ("wait\np50", "right", "outcome", wait("p50")),
        ("wait\np95", "right", "outcome", wait("p95")),
        ("wait\np99", "right", "outcome", wait("p99")),
        ("never\nrun", "right", "outcome", lambda r: str(r.cluster["never_admitted"])),
        ("preempt", "right", "outcome", lambda r: str(r.cluster["preemptions"])),
        (f"lost\n{u}-h", "right", "outcome", lambda r: f"{r.cluster['lost_hours']:,.0f}"),
        (f"borrowed\n{u}-h", "right", "outcome", lambda r: f"{r.cluster['borrowed_hours']:,.0f}"),
        ("JCT\np50", "right", "cost", lambda r: duration(r.cluster["completion_seconds"]["p50"])),
        ("makespan", "right", "cost", lambda r: duration(r.cluster["makespan_hours"] * HOUR)),
        ("cost $", "right", "cost", lambda r: _dollars(r.cluster["cost_usd"])),
        ("in window\n$", "right", "cost", lambda r: _dollars(r.cluster["cost_in_window_usd"])),
        ("nodes", "right", "cost", _nodes),
        ("peak\nnodes", "right", "cost", _peak_nodes),
        ("run s", "right", "cost", lambda r: f"{r.run_seconds:.1f}"),
        *((h, "right", "under", cell) for h, cell in _under_columns(u)),
    ]


def _under_columns(u: str) -> list[tuple[str, _Cell]]:
    """(header, cell) of the under-provision figures; "—" for a fixed cluster's run."""

    def cell(show: Callable[[dict[str, Any]], str]) -> _Cell:
        return lambda r: show(r.cluster) if r.variant.autoscale else "—"

    return [
        ("under-prov.\nevents", cell(lambda c: f"{c['under_provision_events']:,}")),
        ("jobs\nshort", cell(lambda c: f"{c['under_provisioned_jobs']:,}")),
        (f"{u}-h\nshort", cell(lambda c: f"{c['under_provisioned_hours']:,.1f}")),
        ("span", cell(lambda c: duration(c["under_provision_span_hours"] * HOUR))),
    ]


def _dollars(value: float) -> str:
    """Thousands separators; cents when small."""
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


def _nodes(r: VariantResult) -> str:
    """Nodes launched (autoscaled) or the fixed cluster's nodes."""
    c = r.cluster
    return str(c["nodes_launched"] if r.variant.autoscale else c["fixed_nodes"])


def _peak_nodes(r: VariantResult) -> str:
    c = r.cluster
    return str(c["peak_nodes"] if r.variant.autoscale else c["fixed_nodes"])


_CAPTIONS = {
    "outcome": (
        "useful alloc: {u}-hours used, less work thrown away by preemption, / schedulable "
        "within the input window, fixed clusters only (an autoscaled cluster's capacity follows "
        "demand: compare those by paid util); paid util: used / paid until the run's work is "
        "done; wait: all time queued, first wait and after every preemption (still queued at "
        "the end: censored); never run: never admitted; borrowed: used beyond the team's "
        "quota; lost: work discarded by preemptions"
    ),
    "cost": (
        "JCT: submission to completion; makespan: last job finished; cost: fixed nodes × "
        "on-demand price × run time, or the simulated cloud's bill; in window: what was paid "
        "for during the input window only; nodes: launched (autoscaled) or the fixed cluster's"
    ),
    "under": (
        "under-provisioning, autoscaled runs only: a job is short of capacity while quota "
        "would admit it but no node has room (waiting for a launch); an event is a span with "
        "some job short (overlapping waits are one event); jobs short: how many; {u}-h short: "
        "Σ {u}s × time short (demand kept waiting for capacity); span: the events' total length"
    ),
}


def comparison_tables(
    inp: SimulationInput, results: Sequence[VariantResult], wide: bool = False
) -> list[Table]:
    """One row per policy. Two tables that each fit 120 columns (outcomes: allocation,
    utilisation of paid capacity, waits, preemptions, borrowing; then completion, cost and
    nodes; then, when some runs are autoscaled, their under-provisioning), or with ``wide``
    one table with every column."""
    u = unit(inp.resource)
    columns = _columns(u)
    autoscaled = [r for r in results if r.variant.autoscale]
    if not autoscaled:
        columns = [c for c in columns if c[2] != "under"]
    groups = (
        [("all", columns)]
        if wide
        else [(g, [c for c in columns if c[2] == g]) for g in ("outcome", "cost", "under")]
    )
    titles = {"cost": "completion, cost and nodes", "under": "under-provisioning (autoscaled)"}
    longest = max((len(r.name) for r in results), default=6)
    tables = []
    for group, chosen in groups:
        if not chosen:
            continue
        title = f"{inp.name}: {len(results)} policies, same workloads and seed"
        table = Table(title=titles.get(group, title), title_justify="left")
        table.add_column("policy", min_width=longest, no_wrap=True)
        for header, justify, _, _ in chosen:
            table.add_column(header, justify=justify, no_wrap=False)  # type: ignore[arg-type]
        for r in autoscaled if group == "under" else results:
            table.add_row(r.name, *(cell(r) for _, _, _, cell in chosen))
        groups_shown = {c[2] for c in chosen}
        table.caption = "; ".join(c.format(u=u) for g, c in _CAPTIONS.items() if g in groups_shown)
        table.caption_justify = "left"
        tables.append(table)
    return tables


# -- charts ----------------------------------------------------------------------------------


_OUTCOME = (
    "useful_allocation",
    "utilisation_of_paid",
    "queue_wait_seconds",
    "preemptions",
    "borrowed_hours",
    "lost_hours",
    "cost_usd",
)
"""What a user compares policies by: runs equal in all of these had the same outcome."""


def coinciding(results: Sequence[VariantResult]) -> list[str]:
    """A sentence per group of policies whose runs came out the same, saying why: their rules
    differ only under contention, and there was none they decide (no preemption, no limit
    that bound). A user comparing policies must not read equal numbers as equal policies."""
    groups: dict[str, list[VariantResult]] = {}
    for r in results:
        key = repr([r.cluster.get(k) for k in _OUTCOME]) + repr(r.variant.autoscale)
        groups.setdefault(key, []).append(r)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        m = members[0].measured
        c = members[0].cluster
        u = unit(m.resource)
        peak = float(m.usage.values.sum(axis=1).max()) if m.usage.values.size else 0.0
        names = ", ".join(r.name for r in members)
        if c["preemptions"]:
            reasons = c.get("preemptions_by_reason") or {}
            detail = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
            out.append(
                f"{names} came out the same, preemptions included ({c['preemptions']}: "
                f"{detail}): the rules they differ in never decided differently on this input. "
                "They would differ where those rules bind (other limits, weights or demand)."
            )
            continue
        out.append(
            f"{names} came out the same (no preemption, no wait for another team's quota): "
            "their rules differ only when teams contend for capacity, and here work used at "
            f"most {peak:,.0f} of {c['capacity_peak']:,.0f} {u}s, so no borrowing limit bound "
            "and nothing had to be reclaimed. They would differ on a busier input (more days, "
            "a smaller cluster, more demand)."
        )
    return out


def findings(results: Sequence[VariantResult]) -> list[str]:
    """The comparison in words, for the top of the report: which policy is cheapest, which
    keeps work waiting least (p99 of all time queued), which uses the fixed cluster best
    (useful allocation), and what preemption cost. Ties go to the policy listed first."""
    if len(results) < 2:
        return []
    out = []
    cost = [r.cluster["cost_usd"] for r in results]
    cheap, dear = int(np.argmin(cost)), int(np.argmax(cost))
    if cost[dear] > 0 and cheap != dear:
        out.append(
            f"Cheapest: {results[cheap].name} (${cost[cheap]:,.0f}), "
            f"{1 - cost[cheap] / cost[dear]:.0%} below the dearest, {results[dear].name} "
            f"(${cost[dear]:,.0f})."
        )
    p99 = [r.cluster["queue_wait_seconds"]["p99"] or 0.0 for r in results]
    best, worst = int(np.argmin(p99)), int(np.argmax(p99))
    if p99[worst] > p99[best]:
        out.append(
            f"Shortest waits: {results[best].name} (p99 {duration(p99[best])}) against "
            f"{duration(p99[worst])} under {results[worst].name}."
        )
    fixed = [r for r in results if not r.variant.autoscale]
    useful = [r.cluster["useful_allocation"] for r in fixed]
    if len(fixed) > 1 and all(u is not None for u in useful):
        top, low = int(np.argmax(useful)), int(np.argmin(useful))
        if useful[top] > useful[low]:
            out.append(
                f"Fixed cluster used best by {fixed[top].name} ({useful[top]:.1%} useful "
                f"allocation; {useful[low]:.1%} under {fixed[low].name})."
            )
    lost = [(r.cluster["lost_hours"], r) for r in results if r.cluster["preemptions"]]
    if lost:
        hours, r = max(lost, key=lambda x: x[0])
        u = unit(r.measured.resource)
        out.append(
            f"Most work lost to preemption: {r.name} ({r.cluster['preemptions']} "
            f"preemptions, {hours:,.0f} {u}-hours thrown away)."
        )
    never = [r for r in results if r.cluster["never_admitted"]]
    for r in never:
        out.append(f"{r.name}: {r.cluster['never_admitted']:,} workloads never ran.")
    return out


def _fixed_share(r: VariantResult, key: str) -> str:
    """An allocation figure of a fixed-cluster run; "—" for autoscaled runs (their
    denominator, Ready capacity, follows demand: not comparable)."""
    return "—" if r.variant.autoscale else _share(r.cluster[key])


def _share(value: float | None) -> str:
    """A fraction as a percentage; "n/a" when undefined."""
    return "n/a" if value is None else f"{value:.1%}"


def _scale(horizon: float) -> tuple[float, str]:
    return (86400.0, "days") if horizon > 2 * 86400 else (3600.0, "hours")


def _edges(horizon: float, bins: int = BINS) -> FloatArray:
    return np.linspace(0.0, horizon, bins + 1)


def _bin_label(edges: FloatArray) -> str:
    return f"mean over {duration(float(edges[1] - edges[0]))} bins"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def usage_chart(inp: SimulationInput, r: VariantResult) -> bytes:
    """Per team: usage within quota, borrowed beyond it, and the quota line."""
    m = r.measured
    horizon = r.end
    edges = _edges(horizon)
    mids = (edges[:-1] + edges[1:]) / 2
    scale, label = _scale(horizon)
    usage = m.usage.bin_means(edges)
    over = Step(m.usage.times, np.maximum(m.usage.values - m.quota[None, :], 0.0))
    borrowed = over.bin_means(edges)
    n = len(m.team_names)
    cols = 4 if n > 4 else max(n, 1)
    rows = -(-n // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.4 * cols, 2.2 * rows + 0.6), sharex=True, squeeze=False
    )
    u = unit(inp.resource)
    x = mids / scale
    for k, team in enumerate(m.team_names):
        ax = axes[k // cols][k % cols]
        within = usage[:, k] - borrowed[:, k]
        ax.fill_between(x, 0, within, step="mid", color="#4C72B0", lw=0, label="within quota")
        ax.fill_between(
            x, within, usage[:, k], step="mid", color="#DD8452", lw=0, label="beyond quota"
        )
        ax.axhline(m.quota[k], color="black", lw=0.8, ls="--", label="quota")
        ax.axvline(inp.duration / scale, color="grey", lw=0.6, ls=":")
        ax.set_title(team, fontsize=8)
        ax.tick_params(labelsize=7)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncols=3)
    fig.suptitle(
        f"{r.name}: {u}s in use per team vs quota ({_bin_label(edges)}; x in {label}; "
        "dotted: end of the input window)",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return _png(fig)


def idle_chart(inp: SimulationInput, results: Sequence[VariantResult]) -> bytes:
    """Idle capacity over time: schedulable minus used (fixed), paid minus used (autoscaled)."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    horizon = max(r.end for r in results)
    scale, label = _scale(horizon)
    edges = _edges(horizon)
    mids = (edges[:-1] + edges[1:]) / 2
    for i, r in enumerate(results):
        m = r.measured
        used = m.usage.bin_means(edges).sum(axis=1)
        base = m.paid if r.variant.autoscale else m.capacity
        idle = base.bin_means(edges) - used
        idle[mids > r.end] = np.nan  # the line stops when the run's cluster is released
        ax.plot(mids / scale, idle, lw=1.0, color=COLORS[i % 10], label=r.name)
    ax.axvline(inp.duration / scale, color="grey", lw=0.6, ls=":")
    ax.set_xlabel(label)
    ax.set_ylabel(f"idle {unit(inp.resource)}s")
    ax.set_title(
        "Idle capacity: schedulable − used (fixed), paid − used (autoscaled); "
        f"{_bin_label(edges)}; dotted: end of the input window",
        fontsize=10,
        loc="left",
    )
    ax.legend(fontsize=8, ncols=2)
    ax.grid(alpha=0.3)
    return _png(fig)


def _p95(values: FloatArray) -> float:
    ordered = np.sort(values)
    return float(ordered[min(values.size - 1, int(np.ceil(0.95 * values.size)) - 1)])


def wait_chart(inp: SimulationInput, results: Sequence[VariantResult]) -> bytes:
    """Queue waits: share of workloads waiting longer than x (per policy), and p95 per team and
    priority (per policy)."""
    first = results[0].measured
    keys = sorted(
        {(int(t), int(p)) for t, p in zip(first.wait_team, first.wait_priority, strict=True)}
    )
    priorities = sorted({p for _, p in keys})
    fig = plt.figure(figsize=(13, 3.4 + 0.3 * len(results)))
    grid = fig.add_gridspec(1, 2, width_ratios=(1, 2.2))
    ax = fig.add_subplot(grid[0])
    heat = np.full((len(results), len(keys)), np.nan)
    for i, r in enumerate(results):
        m = r.measured
        waits, _, _ = m.queue_times(r.end)
        ordered = np.sort(waits)
        if ordered.size:
            frac = 1.0 - np.arange(1, ordered.size + 1) / ordered.size
            xs = np.maximum(ordered, 1.0) / 60
            ax.step(xs, frac, where="post", color=COLORS[i % 10], lw=1.0, label=r.name)
        for j, (team, prio) in enumerate(keys):
            mine = waits[(m.wait_team == team) & (m.wait_priority == prio)]
            if mine.size:
                heat[i, j] = _p95(mine)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: duration(v * 60)))
    ax.set_xlabel("wait (log scale; no wait drawn at 1 s)")
    ax.set_ylabel("share of workloads waiting longer")
    ax.set_title("Queue wait (never admitted: censored)", fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax2 = fig.add_subplot(grid[1])
    minutes = np.maximum(heat / 60, 0.1)  # a log scale: no wait is drawn at 6 s
    top = float(np.nanmax(minutes)) if np.isfinite(minutes).any() else 1.0
    vmax = max(top, 1.0)
    norm = LogNorm(vmin=0.1, vmax=vmax)
    image = ax2.imshow(minutes, aspect="auto", cmap="magma_r", norm=norm)
    names = first.team_names
    ax2.set_xticks(
        range(len(keys)),
        [names[t] + (f"/p{p}" if len(priorities) > 1 else "") for t, p in keys],
        rotation=60,
        ha="right",
        fontsize=7,
    )
    ax2.set_yticks(range(len(results)), [r.name for r in results], fontsize=8)
    for i in range(heat.shape[0]):
        for j in range(heat.shape[1]):
            if not np.isnan(heat[i, j]):
                ax2.text(
                    j,
                    i,
                    duration(float(heat[i, j])),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if norm(minutes[i, j]) > 0.6 else "black",
                )
    bar = fig.colorbar(image, ax=ax2, fraction=0.03)
    ticks = [t for t in (0.1, 1, 10, 60, 600, 1440, 14400) if t <= vmax]
    bar.set_ticks(ticks, labels=[duration(t * 60) for t in ticks])
    bar.set_label("p95 wait (log scale)", fontsize=8)
    ax2.set_title(
        "p95 queue wait per team" + (" and priority" if len(priorities) > 1 else ""),
        fontsize=10,
        loc="left",
    )
    fig.tight_layout()
    return _png(fig)


def cumulative_cost(m: Measured, horizon: float) -> tuple[FloatArray, FloatArray]:
    """(times, USD paid so far) -- piecewise linear between the times; before the 60 s
    minimum billing of the cloud."""
    times = np.append(m.rate.times[m.rate.times < horizon], horizon)
    widths = np.diff(times)
    values = m.rate.values[: widths.size]
    return times, np.concatenate(([0.0], np.cumsum(values * widths / HOUR)))


def overview_chart(inp: SimulationInput, results: Sequence[VariantResult]) -> bytes:
    """Each policy as a point: cost against the p99 of time queued, and against utilisation
    of paid capacity (lower left and lower right are better)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6), sharey=True)
    cost = [r.cluster["cost_usd"] for r in results]
    wait = [(r.cluster["queue_wait_seconds"]["p99"] or 0.0) / HOUR for r in results]
    util = [100 * r.cluster["utilisation_of_paid"] for r in results]
    for ax, xs in ((ax1, wait), (ax2, util)):
        labels: dict[tuple[float, float], list[str]] = {}  # policies at one point: one label
        for i, r in enumerate(results):
            marker = "s" if r.variant.autoscale else "o"
            ax.scatter([xs[i]], [cost[i]], color=COLORS[i % 10], marker=marker, s=50, zorder=3)
            labels.setdefault((round(xs[i], 6), round(cost[i], 2)), []).append(r.name)
        for (x, y), names in labels.items():
            ax.annotate(
                ", ".join(names), (x, y), fontsize=7, xytext=(5, 4), textcoords="offset points"
            )
    ax1.set_xlabel("p99 of time queued (hours)")
    ax2.set_xlabel("utilisation of paid capacity (%)")
    ax1.set_ylabel("cost (USD)")
    ax1.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax1.set_title("Cost vs waiting (○ fixed, □ autoscaled)", fontsize=10, loc="left")
    ax2.set_title("Cost vs utilisation of what was paid for", fontsize=10, loc="left")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def nodes_cost_chart(inp: SimulationInput, results: Sequence[VariantResult]) -> bytes:
    """Nodes paid for, and cumulative cost, over time."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6))
    horizon = max(r.end for r in results)
    scale, label = _scale(horizon)
    for i, r in enumerate(results):
        m = r.measured
        color = COLORS[i % 10]
        keep = m.nodes.times < r.end
        t = np.append(m.nodes.times[keep], r.end)
        v = np.append(m.nodes.values[keep], m.nodes.values[keep][-1] if keep.any() else 0.0)
        ax1.step(t / scale, v, where="post", lw=1.0, color=color, label=r.name)
        ct, cv = cumulative_cost(m, r.end)
        ax2.plot(ct / scale, cv, lw=1.0, color=color, label=r.name)
    ax1.set_title("Nodes paid for (dotted: end of the input window)", fontsize=10, loc="left")
    ax2.set_title("Cumulative cost, USD (before the 60 s minimum)", fontsize=10, loc="left")
    ax1.set_ylabel("nodes")
    ax2.set_ylabel("USD")
    ax2.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    for ax in (ax1, ax2):
        ax.set_xlabel(label)
        ax.axvline(inp.duration / scale, color="grey", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7, ncols=2)
    fig.tight_layout()
    return _png(fig)


def preemption_chart(inp: SimulationInput, results: Sequence[VariantResult]) -> bytes:
    """Preemptions and work lost to them, by cause, per policy."""
    events = [r.measured.preemptions() for r in results]
    reasons = sorted({p[2] for mine in events for p in mine})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 1.2 + 0.35 * len(results)))
    y = np.arange(len(results))
    left1 = np.zeros(len(results))
    left2 = np.zeros(len(results))
    for k, reason in enumerate(reasons):
        counts = np.array([sum(p[2] == reason for p in mine) for mine in events], dtype=float)
        lost = np.array([sum(p[3] for p in mine if p[2] == reason) for mine in events])
        color = COLORS[k % 10]
        ax1.barh(y, counts, left=left1, color=color, label=reason)
        ax2.barh(y, lost, left=left2, color=color, label=reason)
        left1 = left1 + counts
        left2 = left2 + lost
    u = unit(inp.resource)
    for ax, title in ((ax1, "Preemptions by cause"), (ax2, f"{u}-hours of work lost")):
        ax.set_yticks(y, [r.name for r in results], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(alpha=0.3, axis="x")
    if reasons:
        ax1.legend(fontsize=7)
    else:
        ax1.text(0.5, 0.5, "no preemptions", transform=ax1.transAxes, ha="center")
    fig.tight_layout()
    return _png(fig)


# -- HTML ------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3}
li{margin:0.2em 0}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.note{color:#555;font-size:13px}
.warn{color:#a00;background:#fee;padding:6px 10px;border-left:4px solid #a00}
.findings li{font-size:15px}
.wide{overflow-x:auto}
"""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _cluster_rows(inp: SimulationInput, results: Sequence[VariantResult]) -> list[list[str]]:
    rows = []
    for r in results:
        c = r.cluster
        w = c["queue_wait_seconds"]
        j = c["completion_seconds"]
        rows.append(
            [
                r.name,
                _fixed_share(r, "useful_allocation"),
                _fixed_share(r, "allocation"),
                f"{c['utilisation_of_paid']:.1%}",
                f"{c['used_hours']:,.0f}",
                f"{c['available_hours']:,.0f}",
                f"{c['paid_hours']:,.0f}",
                duration(w["mean"]),
                duration(w["p50"]),
                duration(w["p95"]),
                duration(w["p99"]),
                duration(c["first_wait_seconds"]["p99"]),
                str(c["requeued"]),
                str(c["never_admitted"]),
                duration(j["p50"]),
                duration(j["p95"]),
                str(c["preemptions"]),
                f"{c['lost_hours']:,.0f}",
                f"{c['borrowed_hours']:,.0f}",
                f"{c['cost_usd']:,.0f}",
                f"{c['cost_in_window_usd']:,.0f}",
                f"{c['spillover_hours']:,.0f}",
                str(c["nodes_launched"]) if r.variant.autoscale else str(c["fixed_nodes"]),
                f"{c['makespan_hours']:,.1f}",
                f"{c['run_hours']:,.1f}",
                f"{r.run_seconds:.1f}",
            ]
        )
    return rows


def _team_rows(r: VariantResult) -> list[list[str]]:
    rows = []
    for team, t in r.teams.items():
        w = t["queue_wait_seconds"]
        rows.append(
            [
                team,
                f"{t['quota']:g}",
                str(t["workloads"]),
                f"{t['used_hours']:,.0f}",
                f"{t['share_of_used']:.1%}",
                f"{t['borrowed_hours']:,.0f}",
                f"{t['borrowed_at_admission_hours']:,.0f}",
                duration(w["mean"]),
                duration(w["p50"]),
                duration(w["p95"]),
                duration(w["p99"]),
                str(t["never_admitted"]),
                duration(t["completion_seconds"]["p50"]),
                str(t["preemptions"]),
                f"{t['lost_hours']:,.1f}",
            ]
        )
    return rows


_NOT_IN_VERDICT = {"JCT\np50", "in window\n$", "run s"}
"""Columns of the terminal tables left out of the report's verdict (in "All measures")."""


def _img(name: str, title: str, png: bytes) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return (
        f"<img alt='{html.escape(title)}' src='data:image/png;base64,{encoded}'>"
        f"<p class='note'>Also saved as <a href='{name}'>{name}</a>.</p>"
    )


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a regular file of its own: a symlink already at ``path``
    is replaced, never written through (a report folder shared with others must not let them
    redirect the report onto another file)."""
    if path.is_symlink():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_report(out: Path, inp: SimulationInput, results: Sequence[VariantResult]) -> list[Path]:
    """Write ``index.html`` (self-contained), the charts as PNG files and ``metrics.json`` into
    ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    u = unit(inp.resource)
    data = to_json(inp, results)
    overview = ("overview.png", "Cost, waiting and utilisation", overview_chart(inp, results))
    charts: list[tuple[str, str, bytes]] = [
        overview,
        ("idle.png", "Idle capacity", idle_chart(inp, results)),
        ("queue-wait.png", "Queue wait", wait_chart(inp, results)),
        ("nodes-cost.png", "Nodes and cost", nodes_cost_chart(inp, results)),
        ("preemptions.png", "Preemptions", preemption_chart(inp, results)),
    ]
    for r in results:
        charts.append((f"usage-{r.name}.png", f"{u} usage per team: {r.name}", usage_chart(inp, r)))
    written = []
    for name, _, png in charts:
        path = out / name
        write_file(path, png)
        written.append(path)
    metrics = out / "metrics.json"
    write_file(metrics, json.dumps(data, indent=2).encode())
    written.append(metrics)

    verdict = [c for c in _columns(u) if c[0] not in _NOT_IN_VERDICT and c[2] != "under"]
    autoscaled = [r for r in results if r.variant.autoscale]
    under = (
        [
            "<h3>Under-provisioning (autoscaled runs)</h3>",
            _table(
                ["policy", *(h.replace("\n", " ") for h, _ in _under_columns(u))],
                [[r.name, *(cell(r) for _, cell in _under_columns(u))] for r in autoscaled],
            ),
            f"<p class='note'>{html.escape(_CAPTIONS['under'].format(u=u))}.</p>",
        ]
        if autoscaled
        else []
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>fleetshare simulate: {html.escape(inp.name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>fleetshare simulate: {html.escape(inp.name)}</h1>",
        *(
            f"<p class='warn'><b>{html.escape(r.name)}: {html.escape(r.never_served)}</b></p>"
            for r in results
            if r.never_served
        ),
        f"<p>{html.escape(inp.description)}</p>",
        f"<p class='note'>Source: {html.escape(inp.source)}; seed {inp.seed}; "
        f"{len(inp.workloads):,} workloads; {len(inp.nodes)} nodes in the fixed cluster; "
        f"measured resource {html.escape(inp.resource)}; input covers "
        f"{inp.duration / HOUR:,.1f} h"
        + (f" from {html.escape(inp.start)}" if inp.start else "")
        + ". Policies and assumptions are at the end.</p>",
        "<h2>Verdict</h2>",
        _table(
            ["policy", *(h.replace("\n", " ") for h, _, _, _ in verdict)],
            [[r.name, *(cell(r) for _, _, _, cell in verdict)] for r in results],
        ),
        *under,
        "<ul class='findings'>",
        *(f"<li>{html.escape(line)}</li>" for line in [*findings(results), *coinciding(results)]),
        "</ul>",
        _img(*overview),
        "<h2>All measures</h2><div class='wide'>",
        _table(
            [
                "policy",
                "useful allocation (window)",
                "allocation (window)",
                "util. of paid",
                f"used {u}-h",
                f"available {u}-h",
                f"paid {u}-h",
                "wait mean",
                "p50",
                "p95",
                "p99",
                "first wait p99",
                "requeued",
                "never admitted",
                "JCT p50",
                "JCT p95",
                "preemptions",
                f"lost {u}-h",
                f"borrowed {u}-h",
                "cost $",
                "cost in window $",
                f"spillover {u}-h",
                "nodes",
                "makespan h",
                "run h",
                "run s",
            ],
            _cluster_rows(inp, results),
        ),
        f"<p class='note'>allocation (window) = {u}-hours used / available (schedulable "
        f"capacity × time) within the input window, the first {inp.duration / HOUR:,.1f} h, "
        "the same span for every policy; useful allocation leaves out the work preemption threw "
        "away (used − lost, within the window). Both are given for fixed clusters only: an "
        "autoscaled cluster's capacity follows its demand, so compare those by utilisation of "
        "paid. Everything else covers each run: until its last job "
        "finished (makespan) and, autoscaled, its last node was removed (run h). utilisation "
        f"of paid = used / {u}-hours of nodes paid for (a fixed cluster until the run ends, "
        "then released; autoscaled instances from launch to termination); waits are all the "
        "time a job was queued (to its first admission and again after every preemption; "
        "first wait: to the first admission only), time still queued at the end of the run "
        "censored there (a lower bound); requeued = jobs queued again after a preemption; "
        "JCT = finish − "
        f"submit; lost = time run before a preemption × {u}s (the job restarts from scratch); "
        f"borrowed = {u}-hours a team used beyond its quota; borrowed at admission = Σ borrowed "
        "at admission × run time (larger: a job admitted as borrowed keeps counting after its "
        "team is back within quota). A job preempted late restarts from "
        "scratch and can keep a whole fixed cluster paid for long after the window: cost in "
        "window (what was paid for during the window) and spillover (work done after it) show "
        "how much of a difference in cost is that tail. "
        "Cost basis per policy: "
        + "; ".join(
            f"{html.escape(r.name)}: {html.escape(r.cluster['cost_basis'])}" for r in results
        )
        + ".</p></div>",
    ]
    for name, title, png in charts[1:]:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(_img(name, title, png))
    parts.append("<h2>Per team</h2>")
    for r in results:
        parts.append(f"<details><summary><b>{html.escape(r.name)}</b></summary>")
        parts.append(
            _table(
                [
                    "team",
                    "quota",
                    "workloads",
                    f"used {u}-h",
                    "share",
                    f"borrowed {u}-h",
                    f"borrowed at admission {u}-h",
                    "wait mean",
                    "p50",
                    "p95",
                    "p99",
                    "never",
                    "JCT p50",
                    "preemptions",
                    f"lost {u}-h",
                ],
                _team_rows(r),
            )
        )
        if r.warnings:
            parts.append(
                f"<p class='note'>{len(r.warnings)} runner warnings, e.g. "
                f"{html.escape(r.warnings[0])}</p>"
            )
        parts.append("</details>")
    parts += [
        "<h2>Policies</h2><ul>",
        *(
            f"<li><b>{html.escape(r.name)}</b>: {html.escape(r.variant.description)}</li>"
            for r in results
        ),
        "</ul>",
        "<h2>Assumptions</h2><ul>",
        *(f"<li>{html.escape(a)}</li>" for a in data["input"]["assumptions"]),
        "</ul>",
        "<p class='note'>All numbers are also in <a href='metrics.json'>metrics.json</a>.</p>",
    ]
    parts.append("</body></html>")
    index = out / "index.html"
    write_file(index, "\n".join(parts).encode())
    return [index, *written]
