"""Render a run: the JSON contract scripts rely on, and a readable timeline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetshare.governance.admission import Engine
from fleetshare.governance.snapshot import Running, Snapshot
from fleetshare.governance.state import CycleState
from fleetshare.model.node import Node
from fleetshare.model.quantity import format_amounts, format_quantity, to_number
from fleetshare.scenario.runner import RunResult


def _numbers(vector: dict[str, int]) -> dict[str, int | float]:
    return {name: to_number(value) for name, value in sorted(vector.items()) if value}


def team_summary(result: RunResult) -> dict[str, Any]:
    """Per team at the end of the run: quota, used and borrowed, in total and per flavor."""
    return team_usage(
        result.engine, list(result.nodes.values()), list(result.running.values()), result.end_time
    )


def team_usage(
    engine: Engine, nodes: Sequence[Node], running: Sequence[Running], now: float
) -> dict[str, Any]:
    """Per team: quota, used and borrowed, in total and per flavor (numbers in base units),
    from the quota tree of ``engine``'s policy over ``running`` on ``nodes``."""
    snapshot = Snapshot(now, list(nodes), list(running), [])
    state = CycleState(engine.model, engine.policy.cluster, snapshot)
    tree = state.tree
    out: dict[str, Any] = {}
    frs = sorted(engine.model.governed)
    for team in engine.model.teams:
        totals: dict[str, dict[str, int]] = {"quota": {}, "used": {}, "borrowed": {}}
        by_flavor: dict[str, dict[str, dict[str, int]]] = {}
        for fr in frs:
            flavor, resource = fr
            values = {
                "quota": tree.quota(team, fr),
                "used": tree.usage(team, fr),
                "borrowed": tree.borrowed(team, fr),
            }
            for kind, value in values.items():
                if value:
                    totals[kind][resource] = totals[kind].get(resource, 0) + value
                    by_flavor.setdefault(flavor, {}).setdefault(kind, {})[resource] = value
        out[team] = {kind: _numbers(v) for kind, v in totals.items()}
        out[team]["by_flavor"] = {
            flavor: {kind: _numbers(v) for kind, v in kinds.items()}
            for flavor, kinds in sorted(by_flavor.items())
        }
    return out


def to_json(result: RunResult) -> dict[str, Any]:
    """The scenario runner's JSON contract."""
    workloads = {}
    for name, rec in result.records.items():
        workloads[name] = {
            "state": rec.state,
            "team": rec.workload.team,
            "priority": rec.workload.priority,
            "submitted_at": rec.workload.submit_time,
            "admitted_at": rec.admitted_at,
            "finished_at": rec.finished_at,
            "preemptions": rec.preemptions,
            "borrowed": _numbers(rec.borrowed),
            "pending_reason": rec.pending_reason,
            "queue_position": rec.queue_position,
            "flavors": list(dict.fromkeys(rec.flavors)),
            "admitted_pods": {
                ps.name: n for ps, n in zip(rec.workload.podsets, rec.counts, strict=False)
            },
            "placement": {
                ps.name: dict(pods)
                for ps, pods in zip(rec.workload.podsets, rec.placement, strict=False)
            },
        }
    out = {
        "scenario": result.scenario.name,
        "end_time": result.end_time,
        "workloads": workloads,
        "teams": team_summary(result),
        "events": result.events,
        "warnings": result.warnings,
        "policy_notes": list(result.scenario.policy.notes),
    }
    if result.scenario.manifest_notes:
        out["manifest_notes"] = list(result.scenario.manifest_notes)
    if result.autoscaler is not None:
        out.update(autoscaling_summary(result))
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def autoscaling_summary(result: RunResult) -> dict[str, Any]:
    """``"nodes"`` (every launched node: why, what, where, price, and when and why it went),
    ``"cost"`` (USD over the run) and ``"capacity"`` (time-to-capacity: submit -> first
    admission, for workloads that nodes were launched for)."""
    scaler = result.autoscaler
    cloud = result.cloud
    assert scaler is not None and cloud is not None
    nodes = [m.record() for m in scaler.nodes.values()]
    hours = sum(
        max(
            0.0,
            (m.terminated_at if m.terminated_at is not None else result.end_time)
            - m.instance.launched_at,
        )
        / 3600
        for m in scaler.nodes.values()
    )
    waits = [
        rec.first_admitted_at - rec.workload.submit_time
        for name, rec in result.records.items()
        if name in scaler.waited_for_nodes and rec.first_admitted_at is not None
    ]
    capacity: dict[str, Any] = {"workloads": len(waits)}
    if waits:
        capacity.update(
            mean_seconds=round(sum(waits) / len(waits), 3),
            p50_seconds=round(_percentile(waits, 50), 3),
            p95_seconds=round(_percentile(waits, 95), 3),
            max_seconds=round(max(waits), 3),
        )
    return {
        "nodes": nodes,
        "cost": {
            "total_usd": round(cloud.cost(result.end_time), 4),
            "node_hours": round(hours, 4),
            "launched": len(nodes),
            "terminated": sum(1 for m in scaler.nodes.values() if m.terminated_at is not None),
        },
        "capacity": {"time_to_capacity": capacity, "unplaceable": dict(scaler.unplaceable)},
    }


def _event_line(event: dict[str, Any]) -> str:
    kind = event["event"]
    wl = event.get("workload", "")
    if kind == "submit":
        return f"[cyan]submit[/]   {wl} (team {event['team']}, {event['pods']} pods)"
    if kind == "admit":
        borrowed = format_amounts(event["borrowed"])
        extra = f", borrowing {borrowed}" if borrowed else ""
        if event.get("pods"):  # partial admission
            pods = ", ".join(f"{n} {name}" for name, n in event["pods"].items())
            extra += f" (partially: {pods} pods)"
        return f"[green]admit[/]    {wl} on {', '.join(event['flavors'])}{extra}"
    if kind == "preempt":
        why = f": {event['message']}" if event.get("message") else ""
        return f"[red]preempt[/]  {wl} by {event['by']} ({event['reason']}){why}"
    if kind == "pending":
        return f"[yellow]pending[/]  {wl} #{event['position']} in queue: {event['reason']}"
    if kind == "finish":
        return f"[blue]finish[/]   {wl}"
    if kind == "policy":
        return f"[magenta]policy[/]   new policy applied (teams: {', '.join(event['teams'])})"
    if kind == "launch":
        return (
            f"[magenta]launch[/]   {event['node']} ({event['capacity_type']} in {event['zone']}, "
            f"${event['price_per_hour']:.3f}/h): {event['reason']}"
        )
    if kind == "autoscaler":
        details = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("at", "event"))
        return f"[magenta]scaler[/]   {details}"
    why = f" ({event['reason']})" if event.get("reason") else ""
    return f"[magenta]node[/]     {event['node']} {event['action']}{why}"


def print_text(result: RunResult, console: Console) -> None:
    """A readable timeline, then the final state of workloads and teams."""
    scenario = result.scenario
    console.print(f"[bold]{scenario.name}[/]  {scenario.description}".rstrip())
    for note in scenario.policy.notes:
        console.print(f"[dim]policy note: {note}[/]")
    for note in scenario.manifest_notes:
        console.print(f"[dim]manifest note: {escape(note)}[/]")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    for event in result.events:
        console.print(f"t={event['at']:>7}  " + _event_line(event), highlight=False)
    table = Table(title="workloads", title_justify="left")
    for column in ("workload", "team", "state", "admitted", "finished", "preemptions"):
        table.add_column(column, no_wrap=True)
    for name, rec in result.records.items():
        table.add_row(
            name,
            rec.workload.team,
            rec.state,
            "" if rec.admitted_at is None else f"{rec.admitted_at:g}",
            "" if rec.finished_at is None else f"{rec.finished_at:g}",
            ", ".join(f"{p['reason']} by {p['by']}" for p in rec.preemptions),
        )
    console.print(table)
    waiting = [(name, rec) for name, rec in result.records.items() if rec.pending_reason]
    if waiting:
        console.print("[bold]why pending[/]")
        for name, rec in waiting:
            console.print(f"  {name} (#{rec.queue_position} in queue): {rec.pending_reason}")
    teams = Table(title="teams at the end", title_justify="left")
    for column in ("team", "quota", "used", "borrowed"):
        teams.add_column(column)
    for team, summary in team_summary(result).items():
        teams.add_row(team, *(_fmt(summary[k]) for k in ("quota", "used", "borrowed")))
    console.print(teams)
    if result.autoscaler is not None:
        summary = autoscaling_summary(result)
        cost = summary["cost"]
        ttc = summary["capacity"]["time_to_capacity"]
        line = (
            f"[bold]autoscaling[/]: {cost['launched']} nodes launched, {cost['terminated']} "
            f"terminated, {cost['node_hours']:g} node-hours, ${cost['total_usd']:.2f}"
        )
        if ttc["workloads"]:
            line += (
                f"; time to capacity p50 {ttc['p50_seconds']:g} s, p95 {ttc['p95_seconds']:g} s "
                f"({ttc['workloads']} workloads)"
            )
        console.print(line)


def _fmt(vector: dict[str, int | float]) -> str:
    parts = []
    for name, value in vector.items():
        milli = round(value * 1000)
        parts.append(f"{name}={format_quantity(milli, name)}")
    return ", ".join(parts)
