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
from rich.markup import escape
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


# -- terminal ---------------------------------------------------------------------------------


_Cell = Callable[["VariantResult"], str]

DEFINITIONS: dict[str, str] = {
    "useful alloc": "{u}-hours used less the work preemption threw away, / {u}-hours "
    "schedulable, both within the input window (the same span for every policy); fixed "
    "clusters only ('—' autoscaled: their capacity follows demand, compare those by paid util "
    "in window)",
    "allocation": "{u}-hours used / schedulable within the input window, lost work included "
    "(fixed clusters only)",
    "paid util in window": "{u}-hours used / {u}-hours of nodes paid for, both within the "
    "input window",
    "paid util to finish": "{u}-hours used / paid over the whole run, until the last job "
    "finished and (autoscaled) the last node was removed",
    "wait p50": "all the time a job was queued (to its first admission and again after every "
    "preemption; still queued at the end: counted to the end, a lower bound), nearest-rank "
    "median over all jobs",
    "wait p95": "as wait p50, the nearest-rank 95th percentile",
    "wait p99": "as wait p50, the nearest-rank 99th percentile",
    "wait mean": "as wait p50, the mean",
    "first wait p99": "submission to first admission only, nearest-rank 99th percentile",
    "in-quota wait p99": "jobs within their team's quota at submission (the team's unfinished "
    "work at that instant, running or queued, the job and any submitted with it included, fit "
    "its quota): their wait from "
    "submission to first admission, nearest-rank 99th percentile over every team's such jobs "
    "(what the quota guarantee kept: 0 under static quotas unless nodes are fragmented)",
    "in-quota wait max": "as in-quota wait p99, the longest",
    "in-quota jobs": "how many of the team's jobs were within its quota at submission",
    "in-quota wait p50/p95/max": "the first wait of the team's in-quota jobs: nearest-rank "
    "median, 95th percentile and the longest",
    "never run": "jobs never admitted",
    "requeued": "jobs queued again after a preemption",
    "preempt": "preemptions, of every cause (reclaim, fair share, priority, node events)",
    "preempted (in quota)": "preemptions of the team's jobs, of every cause; in brackets those "
    "of jobs admitted within the team's quota (borrowing nothing at admission): sharing took "
    "the team's guaranteed work, not work it had borrowed",
    "preempt in quota": "preemptions of jobs admitted within their team's quota (borrowing "
    "nothing at admission)",
    "lost in quota {u}-h": "{u}-hours thrown away by the preemptions of jobs admitted within "
    "their team's quota",
    "lost {u}-h": "{u}-hours run by jobs before a preemption, thrown away (no checkpointing: "
    "the job restarts from scratch)",
    "borrowed {u}-h": "∫ max(0, usage − quota) per team, summed: {u}-hours used beyond the "
    "team's quota while it was beyond it",
    "borrowed at admission {u}-h": "Σ borrowed at admission × run time (larger: a job "
    "admitted as borrowing keeps counting after its team is back within quota)",
    "lent {u}-h": "{u}-hours of the team's idle quota that other teams used: at every instant "
    "what the teams use beyond their quotas, shared among the teams with idle quota in "
    "proportion to it",
    "cost in window $": "what was paid for during the input window only: fixed nodes × "
    "on-demand price × window hours (the same for every fixed-cluster policy), or the "
    "autoscaled instances paid for in the window",
    "after window (tail) $": "what finishing the work left at the window's end cost after it "
    "(cost to finish − cost in window): a fixed cluster kept until its last job finished, "
    "autoscaled instances until removed. The trace stops at the window's end, so this prices "
    "the backlog, not a saving within the window",
    "cost to finish $": "cost in window + after window: the whole run",
    "makespan": "when the last job finished (from the window's start)",
    "JCT p50": "job completion time, submission to finish, nearest-rank median",
    "JCT p95": "as JCT p50, the 95th percentile",
    "nodes": "the fixed cluster's nodes, or instances launched (autoscaled)",
    "peak nodes": "most nodes at once",
    "policy": "the sharing policy (see Policies at the end)",
    "team": "a team (for a trace: its virtual cluster, queue or user group)",
    "run s": "wall-clock seconds the simulation of this policy took (not a result)",
    "used {u}-h": "Σ {u}s × time of every run of every job, preempted runs included, over the "
    "whole run",
    "available {u}-h": "∫ schedulable capacity over the whole run",
    "paid {u}-h": "∫ capacity of the nodes paid for over the whole run",
    "spillover {u}-h": "{u}-hours used after the window",
    "run h": "hours until the last job finished and (autoscaled) the last node was removed",
    "quota": "the team's guaranteed quota ({u}s)",
    "workloads": "jobs the team submitted",
    "share": "the team's part of all {u}-hours used",
    "never": "the team's jobs never admitted",
    "under-prov. events": "autoscaled runs: maximal spans during which some job that quota "
    "would admit waits for a node (overlapping waits are one event)",
    "jobs short": "autoscaled runs: jobs that waited for a node while quota would admit them",
    "{u}-h short": "autoscaled runs: Σ {u}s × time short of capacity (demand kept waiting for "
    "capacity)",
    "span": "autoscaled runs: the under-provision events' total length",
}
"""Every column of the terminal tables and the report, by its one-line header (``{u}``: the
measured resource's unit); the report's Definitions section and the tables' captions."""


def define(header: str, u: str) -> str:
    """The definition of a column (its header on one line; ``\\n`` in a terminal header is
    a space)."""
    key = header.replace("\n", " ")
    for name, text in DEFINITIONS.items():
        if name.format(u=u) == key:
            return text.format(u=u)
    raise KeyError(f"no definition for column {key!r}")


def _columns(u: str) -> list[tuple[str, str, str, _Cell]]:
    """(header, justify, table, cell) of every comparison column; ``table`` is ``outcome``,
    ``cost`` (the two tables that each fit 120 columns) or ``under`` (under-provisioning,
    autoscaled runs only: a table of their own). In-window figures come first."""

    def wait(key: str) -> _Cell:
        return lambda r: duration(r.cluster["queue_wait_seconds"][key])

    return [
        ("useful\nalloc", "right", "outcome", lambda r: _fixed_share(r, "useful_allocation")),
        (
            "paid util\nin window",
            "right",
            "outcome",
            lambda r: _share(r.cluster["utilisation_of_paid_in_window"]),
        ),
        ("wait\np50", "right", "outcome", wait("p50")),
        ("wait\np95", "right", "outcome", wait("p95")),
        ("wait\np99", "right", "outcome", wait("p99")),
        (
            "in-quota\nwait p99",
            "right",
            "outcome",
            lambda r: duration(r.cluster["in_quota_wait_seconds"]["p99"]),
        ),
        ("never\nrun", "right", "outcome", lambda r: str(r.cluster["never_admitted"])),
        ("preempt", "right", "outcome", lambda r: str(r.cluster["preemptions"])),
        (f"lost\n{u}-h", "right", "outcome", lambda r: f"{r.cluster['lost_hours']:,.0f}"),
        (f"borrowed\n{u}-h", "right", "outcome", lambda r: f"{r.cluster['borrowed_hours']:,.0f}"),
        (
            "cost in\nwindow $",
            "right",
            "cost",
            lambda r: _dollars(r.cluster["cost_in_window_usd"]),
        ),
        (
            "after window\n(tail) $",
            "right",
            "cost",
            lambda r: _dollars(r.cluster["cost_after_window_usd"]),
        ),
        ("makespan", "right", "cost", lambda r: duration(r.cluster["makespan_hours"] * HOUR)),
        ("JCT\np50", "right", "cost", lambda r: duration(r.cluster["completion_seconds"]["p50"])),
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


def _caption(headers: Sequence[str], u: str) -> str:
    """The columns' definitions, for a table's caption."""
    return "; ".join(f"{h.replace(chr(10), ' ')}: {define(h, u)}" for h in headers)


def comparison_tables(
    inp: SimulationInput, results: Sequence[VariantResult], wide: bool = False
) -> list[Table]:
    """One row per policy. Two tables that each fit 120 columns (outcomes: allocation,
    utilisation of paid capacity in the window, waits, in-quota waits, preemptions, borrowing;
    then cost in the window, its tail after the window, completion and nodes; then, when some
    runs are autoscaled, their under-provisioning), or with ``wide`` one table with every
    column."""
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
    titles = {
        "cost": "cost in the window, then the tail after it; completion and nodes",
        "under": "under-provisioning (autoscaled)",
    }
    longest = max((len(r.name) for r in results), default=6)
    tables = []
    for group, chosen in groups:
        if not chosen:
            continue
        title = f"{escape(inp.name)}: {len(results)} policies, same workloads and seed"
        table = Table(title=titles.get(group, title), title_justify="left")
        table.add_column("policy", min_width=longest, no_wrap=True)
        for header, justify, _, _ in chosen:
            table.add_column(header, justify=justify, no_wrap=False)  # type: ignore[arg-type]
        for r in autoscaled if group == "under" else results:
            table.add_row(r.name, *(cell(r) for _, _, _, cell in chosen))
        table.caption = _caption([h for h, _, _, _ in chosen], u)
        table.caption_justify = "left"
        tables.append(table)
    return tables


# -- the lender's view -------------------------------------------------------------------------


LENDER_HEADERS = (
    "team",
    "policy",
    "lent\n{u}-h",
    "in-quota\njobs",
    "in-quota wait\np50/p95/max",
    "preempted\n(in quota)",
    "lost\n{u}-h",
    "borrowed\n{u}-h",
)
"""The lender's view's columns (``\\n``: where a terminal header breaks)."""


def lenders(results: Sequence[VariantResult]) -> list[str]:
    """The teams whose idle quota other teams used (lent {u}-hours above 0.05, shown as at
    least 0.1) under at least one policy, most lent first (the most any policy took from
    them; equal amounts by name)."""
    most: dict[str, float] = {}
    for r in results:
        for team, t in r.teams.items():
            most[team] = max(most.get(team, 0.0), float(t.get("lent_hours", 0.0)))
    return sorted((t for t, h in most.items() if h >= 0.05), key=lambda t: (-most[t], t))


def _waits(w: dict[str, float | None]) -> str:
    return "/".join(duration(w[k]) for k in ("p50", "p95", "max"))


def lender_rows(results: Sequence[VariantResult], teams: Sequence[str]) -> list[list[str]]:
    """One row per lending team and policy (the team named on its first row): what the team
    lent, its in-quota jobs and their waits, the preemptions of its work and what they lost,
    and what it borrowed itself."""
    rows = []
    for team in teams:
        for i, r in enumerate(results):
            t = r.teams.get(team)
            if t is None:
                continue
            rows.append(
                [
                    team if i == 0 else "",
                    r.name,
                    f"{t['lent_hours']:,.1f}",
                    f"{t['in_quota_jobs']:,}",
                    _waits(t["in_quota_wait_seconds"]),
                    f"{t['preemptions']} ({t['preemptions_in_quota']})",
                    f"{t['lost_hours']:,.1f}",
                    f"{t['borrowed_hours']:,.1f}",
                ]
            )
    return rows


LENDERS_SHOWN = 8
"""Lending teams in the terminal's table (all of them in the report and the JSON)."""


def lender_table(inp: SimulationInput, results: Sequence[VariantResult]) -> Table | None:
    """The lender's view for the terminal: per team that lent, under each policy; None when
    no team lent (or a single policy ran: nothing to compare with)."""
    teams = lenders(results)
    if not teams or len(results) < 2:
        return None
    u = unit(inp.resource)
    shown = teams[:LENDERS_SHOWN]
    table = Table(
        title="the lender's view: teams whose idle quota others used, under each policy",
        title_justify="left",
    )
    headers = [h.format(u=u) for h in LENDER_HEADERS]
    for h in headers:
        table.add_column(h, justify="left" if h in ("team", "policy") else "right")
    for row in lender_rows(results, shown):
        if row[0] and table.row_count:
            table.add_section()
        table.add_row(*row)
    more = (
        f" ({len(teams) - len(shown)} more teams lent: see the report or --json)"
        if len(teams) > len(shown)
        else ""
    )
    table.caption = _caption([h for h in headers if h not in ("team", "policy")], u) + more
    table.caption_justify = "left"
    return table


# -- findings ----------------------------------------------------------------------------------


_OUTCOME = (
    "useful_allocation",
    "utilisation_of_paid",
    "queue_wait_seconds",
    "in_quota_wait_seconds",
    "preemptions",
    "borrowed_hours",
    "lent_hours",
    "lost_hours",
    "cost_usd",
)
"""What a user compares policies by: runs equal in all of these had the same outcome."""


def outcome(r: VariantResult) -> str:
    """A run's outcome as a key: equal for runs equal on every figure of ``_OUTCOME`` on the
    same kind of cluster (fixed or autoscaled)."""
    return repr([r.cluster.get(k) for k in _OUTCOME]) + repr(r.variant.autoscale)


def coinciding(results: Sequence[VariantResult]) -> list[str]:
    """A sentence per group of policies whose runs came out the same, saying why: their rules
    differ only under contention, and there was none they decide (no preemption, no limit
    that bound). A user comparing policies must not read equal numbers as equal policies."""
    groups: dict[str, list[VariantResult]] = {}
    for r in results:
        groups.setdefault(outcome(r), []).append(r)
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
                f"{detail}): the rules they differ in never decided differently on this input."
                + _limit_slack(members)
                + " They would differ where those rules bind (other limits, weights or demand)."
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


def _limit_slack(members: Sequence[VariantResult]) -> str:
    """When a policy with a borrow limit of each team's own quota is among ``members``: the
    largest share of its quota that a team used beyond it (at most 100%: within that limit;
    "" otherwise)."""
    if not any(r.variant.sharing == "quota-absolute" for r in members):
        return ""
    m = members[0].measured
    if m.usage.values.size == 0 or not m.team_names:
        return ""
    beyond = np.maximum(m.usage.values - m.quota[None, :], 0.0).max(axis=0)
    room = np.where(m.quota > 0, beyond / np.where(m.quota > 0, m.quota, 1.0), 0.0)
    k = int(np.argmax(room))
    if room[k] > 1:
        return ""
    u = unit(m.resource)
    return (
        f" At most a team used {room[k]:.0%} of its quota beyond it ({m.team_names[k]}: "
        f"{beyond[k]:,.0f} {u}s beyond a quota of {m.quota[k]:,.0f}): within a borrow limit of "
        "its own quota."
    )


def _and(names: Sequence[str]) -> str:
    """a; a and b; a, b and c."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def ranked(
    results: Sequence[VariantResult], value: Callable[[VariantResult], float], shown: _Cell
) -> list[tuple[str, list[str]]]:
    """The policies grouped by a figure as shown (equal as shown = equal: one group), groups
    ordered by the figure, lowest first: ``[(shown, [names]), ...]``."""
    groups: dict[str, list[VariantResult]] = {}
    for r in results:
        groups.setdefault(shown(r), []).append(r)
    ordered = sorted(groups.items(), key=lambda g: value(g[1][0]))
    return [(text, [r.name for r in rs]) for text, rs in ordered]


def _spread(groups: list[tuple[str, list[str]]], every: str) -> str:
    """``X under a and b; Y under c`` -- or ``X under every policy`` for a single group."""
    if len(groups) == 1:
        return f"{groups[0][0]} under {every}"
    return "; ".join(f"{text} under {_and(names)}" for text, names in groups)


def findings(results: Sequence[VariantResult]) -> list[str]:
    """The comparison in words, for the top of the report and under the terminal's tables:
    cost in the window, then the tail after it; waits of all jobs and of in-quota jobs; what
    the teams that lent gave up; use of the fixed cluster; work lost. Policies with equal
    figures (as shown) are named together: a tie has no winner."""
    if len(results) < 2:
        return []
    u = unit(results[0].measured.resource)
    hours = results[0].measured.window / HOUR
    every = f"all {len(results)} policies"
    out = []
    cost = ranked(
        results,
        lambda r: r.cluster["cost_in_window_usd"],
        lambda r: f"${_dollars(r.cluster['cost_in_window_usd'])}",
    )
    fixed = [r.name for r in results if not r.variant.autoscale]
    same_fixed = any(set(fixed) <= set(names) for _, names in cost) and len(fixed) > 1
    out.append(
        f"Cost in the window ({hours:,.4g} h): {_spread(cost, every)}"
        + (
            " (the same nodes for the same hours: sharing changes no fixed cluster's cost)."
            if same_fixed
            else "."
        )
    )
    tails = [r for r in results if r.cluster["cost_after_window_usd"] >= 0.5]
    if tails:
        tail = ranked(
            tails,
            lambda r: r.cluster["cost_after_window_usd"],
            lambda r: (
                f"${_dollars(r.cluster['cost_after_window_usd'])} "
                f"(makespan {duration(r.cluster['makespan_hours'] * HOUR)})"
            ),
        )
        out.append(
            "After the window, finishing the work left at its end (the tail, not part of the "
            f"window's cost): {_spread(tail, 'every policy')}."
        )
    p99 = ranked(
        results,
        lambda r: r.cluster["queue_wait_seconds"]["p99"] or 0.0,
        lambda r: duration(r.cluster["queue_wait_seconds"]["p99"]),
    )
    out.append(f"p99 of time queued: {_spread(p99, every)}.")
    in_quota = ranked(
        results,
        lambda r: r.cluster["in_quota_wait_seconds"]["p99"] or 0.0,
        lambda r: duration(r.cluster["in_quota_wait_seconds"]["p99"]),
    )
    out.append(
        f"Jobs within their team's quota at submission waited (p99) {_spread(in_quota, every)}."
    )
    teams = lenders(results)
    if teams:
        named = _and(teams[:LENDERS_SHOWN]) + (" and others" if len(teams) > LENDERS_SHOWN else "")
        longest = ranked(
            results,
            lambda r: _lender_max_wait(r, teams),
            lambda r: duration(_lender_max_wait(r, teams)),
        )

        def preempted(r: VariantResult, within: bool) -> tuple[float, float]:
            """(preemptions, units x hours lost) of the lenders' work admitted within quota
            (``within``) or borrowing."""
            n_in = _lender_sum(r, teams, "preemptions_in_quota")
            lost_in = _lender_sum(r, teams, "lost_hours_in_quota")
            if within:
                return n_in, lost_in
            n, lost = _lender_sum(r, teams, "preemptions"), _lender_sum(r, teams, "lost_hours")
            return n - n_in, lost - lost_in

        def shown(within: bool) -> _Cell:
            def cell(r: VariantResult) -> str:
                n, lost = preempted(r, within)
                return f"{n:,.0f} ({lost:,.0f} {u}-h lost)"

            return cell

        guaranteed = ranked(results, lambda r: preempted(r, True)[1], shown(True))
        borrowed = ranked(results, lambda r: preempted(r, False)[1], shown(False))
        out.append(
            f"The {len(teams)} teams that lent (others used their idle quota: {named}): the "
            f"longest wait of a job of theirs within quota was {_spread(longest, every)}; "
            f"preemptions of their work admitted within quota: {_spread(guaranteed, every)}; "
            f"of work they had borrowed: {_spread(borrowed, every)}."
        )
    fixed_runs = [r for r in results if not r.variant.autoscale]
    useful = [r.cluster["useful_allocation"] for r in fixed_runs]
    if len(fixed_runs) > 1 and all(v is not None for v in useful):
        alloc = ranked(
            fixed_runs,
            lambda r: -float(r.cluster["useful_allocation"]),
            lambda r: _share(r.cluster["useful_allocation"]),
        )
        out.append(
            f"Useful allocation of the fixed cluster: {_spread(alloc, 'every fixed policy')}."
        )
    if any(r.cluster["preemptions"] for r in results):
        lost = ranked(
            results,
            lambda r: r.cluster["lost_hours"],
            lambda r: (
                f"{r.cluster['preemptions']:,} preemptions, "
                f"{r.cluster['lost_hours']:,.0f} {u}-h thrown away"
            ),
        )
        out.append(f"Work lost to preemption: {_spread(lost, every)}.")
    for r in results:
        if r.cluster["never_admitted"]:
            out.append(f"{r.name}: {r.cluster['never_admitted']:,} workloads never ran.")
    return out


def _lender_sum(r: VariantResult, teams: Sequence[str], key: str) -> float:
    return float(sum(r.teams[t][key] for t in teams if t in r.teams))


def _lender_max_wait(r: VariantResult, teams: Sequence[str]) -> float:
    """The longest in-quota wait of any of ``teams`` (0 when none had in-quota jobs)."""
    waits = [r.teams[t]["in_quota_wait_seconds"]["max"] for t in teams if t in r.teams]
    return float(max((w for w in waits if w is not None), default=0.0))


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
    """Each policy as a point: cost in the window against the p99 of time queued, and against
    utilisation of what was paid for in the window (lower left and lower right are better).
    Policies at one point share one label."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 3.6), sharey=True)
    cost = [r.cluster["cost_in_window_usd"] for r in results]
    wait = [(r.cluster["queue_wait_seconds"]["p99"] or 0.0) / HOUR for r in results]
    util = [100 * (r.cluster["utilisation_of_paid_in_window"] or 0.0) for r in results]
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
    ax2.set_xlabel("utilisation of paid capacity in the window (%)")
    ax1.set_ylabel("cost in the window (USD)")
    ax1.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax1.set_title("Cost in the window vs waiting (○ fixed, □ autoscaled)", fontsize=10, loc="left")
    ax2.set_title(
        "Cost vs utilisation of what was paid for, in the window", fontsize=10, loc="left"
    )
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
.lenders td:nth-child(2),.lenders th:nth-child(2){text-align:left}
dt{font-weight:bold;margin-top:0.4em}
dd{margin:0 0 0 1.5em;font-size:14px}
"""


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    u: str | None = None,
    css: str | None = None,
) -> str:
    """An HTML table; with ``u``, each header carries its definition as a tooltip; ``css``:
    its class."""

    def th(h: str) -> str:
        tip = f" title='{html.escape(define(h, u))}'" if u is not None else ""
        return f"<th{tip}>{html.escape(h)}</th>"

    head = "".join(th(h) for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    kind = f" class='{css}'" if css else ""
    return f"<table{kind}><tr>{head}</tr>{body}</table>"


def _all_measures(u: str) -> list[tuple[str, _Cell]]:
    """(header, cell) of the report's "All measures" table: in-window figures first."""

    def c(key: str, show: Callable[[Any], str]) -> _Cell:
        return lambda r: show(r.cluster[key])

    def hours(v: float) -> str:
        return f"{v:,.0f}"

    return [
        ("policy", lambda r: r.name),
        ("useful alloc", lambda r: _fixed_share(r, "useful_allocation")),
        ("allocation", lambda r: _fixed_share(r, "allocation")),
        ("paid util in window", c("utilisation_of_paid_in_window", _share)),
        ("cost in window $", c("cost_in_window_usd", _dollars)),
        ("after window (tail) $", c("cost_after_window_usd", _dollars)),
        ("cost to finish $", c("cost_usd", _dollars)),
        ("paid util to finish", c("utilisation_of_paid", _share)),
        (f"used {u}-h", c("used_hours", hours)),
        (f"spillover {u}-h", c("spillover_hours", hours)),
        (f"available {u}-h", c("available_hours", hours)),
        (f"paid {u}-h", c("paid_hours", hours)),
        ("wait mean", lambda r: duration(r.cluster["queue_wait_seconds"]["mean"])),
        ("wait p50", lambda r: duration(r.cluster["queue_wait_seconds"]["p50"])),
        ("wait p95", lambda r: duration(r.cluster["queue_wait_seconds"]["p95"])),
        ("wait p99", lambda r: duration(r.cluster["queue_wait_seconds"]["p99"])),
        ("first wait p99", lambda r: duration(r.cluster["first_wait_seconds"]["p99"])),
        ("in-quota wait p99", lambda r: duration(r.cluster["in_quota_wait_seconds"]["p99"])),
        ("in-quota wait max", lambda r: duration(r.cluster["in_quota_wait_seconds"]["max"])),
        ("in-quota jobs", c("in_quota_jobs", lambda v: f"{v:,}")),
        ("requeued", c("requeued", str)),
        ("never run", c("never_admitted", str)),
        ("JCT p50", lambda r: duration(r.cluster["completion_seconds"]["p50"])),
        ("JCT p95", lambda r: duration(r.cluster["completion_seconds"]["p95"])),
        ("preempt", c("preemptions", str)),
        ("preempt in quota", c("preemptions_in_quota", str)),
        (f"lost {u}-h", c("lost_hours", hours)),
        (f"lost in quota {u}-h", c("lost_hours_in_quota", hours)),
        (f"borrowed {u}-h", c("borrowed_hours", hours)),
        (f"borrowed at admission {u}-h", c("borrowed_at_admission_hours", hours)),
        (f"lent {u}-h", c("lent_hours", hours)),
        ("nodes", _nodes),
        ("makespan", lambda r: duration(r.cluster["makespan_hours"] * HOUR)),
        ("run h", c("run_hours", lambda v: f"{v:,.1f}")),
        ("run s", lambda r: f"{r.run_seconds:.1f}"),
    ]


def _team_columns(u: str) -> list[tuple[str, Callable[[str, dict[str, Any]], str]]]:
    """(header, cell of (team, figures)) of the per-team tables."""
    return [
        ("team", lambda team, t: team),
        ("quota", lambda team, t: f"{t['quota']:g}"),
        ("workloads", lambda team, t: str(t["workloads"])),
        (f"used {u}-h", lambda team, t: f"{t['used_hours']:,.0f}"),
        ("share", lambda team, t: f"{t['share_of_used']:.1%}"),
        (f"borrowed {u}-h", lambda team, t: f"{t['borrowed_hours']:,.0f}"),
        (
            f"borrowed at admission {u}-h",
            lambda team, t: f"{t['borrowed_at_admission_hours']:,.0f}",
        ),
        (f"lent {u}-h", lambda team, t: f"{t['lent_hours']:,.1f}"),
        ("wait mean", lambda team, t: duration(t["queue_wait_seconds"]["mean"])),
        ("wait p50", lambda team, t: duration(t["queue_wait_seconds"]["p50"])),
        ("wait p95", lambda team, t: duration(t["queue_wait_seconds"]["p95"])),
        ("wait p99", lambda team, t: duration(t["queue_wait_seconds"]["p99"])),
        ("in-quota jobs", lambda team, t: f"{t['in_quota_jobs']:,}"),
        ("in-quota wait p50/p95/max", lambda team, t: _waits(t["in_quota_wait_seconds"])),
        ("never", lambda team, t: str(t["never_admitted"])),
        ("JCT p50", lambda team, t: duration(t["completion_seconds"]["p50"])),
        (
            "preempted (in quota)",
            lambda team, t: f"{t['preemptions']} ({t['preemptions_in_quota']})",
        ),
        (f"lost {u}-h", lambda team, t: f"{t['lost_hours']:,.1f}"),
    ]


_NOT_IN_VERDICT = {"JCT\np50", "run s"}
"""Columns of the terminal tables left out of the report's verdict (in "All measures")."""


def report_headers(u: str) -> list[str]:
    """Every column header of the report's tables, on one line each, first use first."""
    verdict = [c[0] for c in _columns(u) if c[0] not in _NOT_IN_VERDICT and c[2] != "under"]
    under = [h for h, _ in _under_columns(u)]
    lender = [h.format(u=u) for h in LENDER_HEADERS]
    every = [
        "policy",
        *verdict,
        *under,
        *lender,
        *(h for h, _ in _all_measures(u)),
        *(h for h, _ in _team_columns(u)),
    ]
    return list(dict.fromkeys(h.replace("\n", " ") for h in every))


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
    ``out``; return the paths written. The page leads with the in-window figures, the findings
    and the lender's view; every column is defined in its Definitions section."""
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

    def one_line(h: str) -> str:
        return h.replace("\n", " ")

    verdict = [c for c in _columns(u) if c[0] not in _NOT_IN_VERDICT and c[2] != "under"]
    autoscaled = [r for r in results if r.variant.autoscale]
    under = (
        [
            "<h3>Under-provisioning (autoscaled runs)</h3>",
            _table(
                ["policy", *(one_line(h) for h, _ in _under_columns(u))],
                [[r.name, *(cell(r) for _, cell in _under_columns(u))] for r in autoscaled],
                u,
            ),
            "<p class='note'>"
            + html.escape(_caption([h for h, _ in _under_columns(u)], u))
            + ".</p>",
        ]
        if autoscaled
        else []
    )
    teams = lenders(results)
    lender_part = (
        [
            "<h2>The lender's view</h2>",
            f"<p>The teams whose idle quota other teams used ({len(teams)}), under each "
            "policy: what they lent, how long their jobs within quota waited (static quotas "
            "are the baseline), how often their work was preempted and what that threw "
            "away, and what they borrowed themselves.</p>",
            _table(
                [one_line(h.format(u=u)) for h in LENDER_HEADERS],
                lender_rows(results, teams),
                u,
                "lenders",
            ),
        ]
        if teams and len(results) > 1
        else [
            "<h2>The lender's view</h2>",
            "<p class='note'>No team's idle quota was used by another team under any "
            "policy: no team lent.</p>",
        ]
    )
    window = f"{inp.duration / HOUR:,.1f} h"
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
        f"measured resource {html.escape(inp.resource)}; input covers {window}"
        + (f" from {html.escape(inp.start)}" if inp.start else "")
        + ". Definitions follow the lender's view; policies and assumptions are at the "
        "end.</p>",
        "<h2>Verdict</h2>",
        f"<p class='note'>Cost and allocation are over the input window ({window}), the "
        "same span for every policy; the cost of finishing the work left at its end is the "
        "separate tail column. Equal figures are equal: no policy is singled out.</p>",
        _table(
            ["policy", *(one_line(h) for h, _, _, _ in verdict)],
            [[r.name, *(cell(r) for _, _, _, cell in verdict)] for r in results],
            u,
        ),
        *under,
        "<ul class='findings'>",
        *(f"<li>{html.escape(line)}</li>" for line in [*findings(results), *coinciding(results)]),
        "</ul>",
        *lender_part,
        _img(*overview),
        "<h2>Definitions</h2><dl class='defs'>",
        *(
            f"<dt>{html.escape(h)}</dt><dd>{html.escape(define(h, u))}</dd>"
            for h in report_headers(u)
        ),
        "</dl>",
        f"<p class='note'>The input window is the first {window}, the same for every policy. "
        "Each run goes on until its work is done (makespan) and, autoscaled, its last node "
        "is removed (run h); figures not marked 'in window' cover the whole run. Cost "
        "basis per policy: "
        + "; ".join(
            f"{html.escape(r.name)}: {html.escape(r.cluster['cost_basis'])}" for r in results
        )
        + ".</p>",
        "<h2>All measures</h2><div class='wide'>",
        _table(
            [h for h, _ in _all_measures(u)],
            [[cell(r) for _, cell in _all_measures(u)] for r in results],
            u,
        ),
        "</div>",
    ]
    for name, title, png in charts[1:]:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(_img(name, title, png))
    parts.append("<h2>Per team</h2>")
    columns = _team_columns(u)
    for r in results:
        parts.append(f"<details><summary><b>{html.escape(r.name)}</b></summary>")
        parts.append(
            _table(
                [h for h, _ in columns],
                [[cell(team, t) for _, cell in columns] for team, t in r.teams.items()],
                u,
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
