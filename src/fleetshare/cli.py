"""The ``fleetshare`` command line."""

from __future__ import annotations

import json
from enum import StrEnum
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
import yaml
from rich.console import Console
from rich.table import Table

from fleetshare.governance.quota import compile_policy
from fleetshare.model.catalog import load_catalog
from fleetshare.model.quantity import format_quantity
from fleetshare.policy.schema import PolicyError, load_policy
from fleetshare.scenario.expect import mismatches
from fleetshare.scenario.loader import ScenarioError, load_scenario
from fleetshare.scenario.report import print_text, to_json
from fleetshare.scenario.runner import run_scenario

app = typer.Typer(
    help="fleetshare: fair sharing and right-sizing of shared accelerator clusters.",
    no_args_is_help=True,
)
scenario_app = typer.Typer(
    help="Run governance scenarios on a virtual clock.", no_args_is_help=True
)
app.add_typer(scenario_app, name="scenario")
policy_app = typer.Typer(help="Validate and import governance policies.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


class Source(StrEnum):
    """Policy formats fleetshare imports."""

    KUEUE = "kueue"
    HYPERPOD = "hyperpod"


def _fail(message: str, code: int = 2) -> NoReturn:
    Console(stderr=True).print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@policy_app.command("validate")
def validate_policy(
    path: Annotated[Path, typer.Argument(help="policy file (YAML or JSON)")],
) -> None:
    """Check a fleetshare policy; print what it resolves to, or each bad field and why."""
    try:
        policy = load_policy(yaml.safe_load(path.read_text()), str(path))
        model = compile_policy(policy, load_catalog())
    except (PolicyError, yaml.YAMLError, OSError) as exc:
        _fail(str(exc))
    console = Console()
    console.print(f"[green]valid:[/] {len(policy.teams)} teams, {len(policy.groups)} groups")
    for name, node in model.nodes.items():
        quota = ", ".join(
            f"{res}={format_quantity(v, res)} on {flavor}"
            for (flavor, res), v in sorted(node.quota.items())
        )
        console.print(f"  {'team' if node.is_team else 'group'} {name}: {quota or 'no quota'}")


@policy_app.command("import")
def import_policy(
    source: Annotated[Source, typer.Argument(help="format of FILE")],
    path: Annotated[Path, typer.Argument(help="Kueue YAML or HyperPod JSON file")],
    borrow_limit_reading: Annotated[
        str, typer.Option(help="HyperPod BorrowLimit as percent of 'quota' or of 'idle'")
    ] = "quota",
) -> None:
    """Convert a Kueue or HyperPod policy to fleetshare's format (YAML on stdout)."""
    from fleetshare.policy.hyperpod import import_hyperpod
    from fleetshare.policy.kueue import import_kueue

    if borrow_limit_reading not in ("quota", "idle"):
        _fail("--borrow-limit-reading must be quota or idle")
    try:
        text = path.read_text()
        if source == Source.KUEUE:
            policy = import_kueue(text)
        else:
            reading: Literal["quota", "idle"] = (
                "idle" if borrow_limit_reading == "idle" else "quota"
            )
            policy = import_hyperpod(text, borrow_limit_reading=reading)
    except (PolicyError, OSError) as exc:
        _fail(str(exc))
    data = policy.model_dump(mode="json", exclude_defaults=True)
    print(yaml.safe_dump(data, sort_keys=False), end="")
    for note in policy.notes:
        Console(stderr=True).print(f"[yellow]note:[/] {note}", highlight=False)


def bundled_scenarios() -> list[Path]:
    """The example scenarios shipped with fleetshare."""
    folder = files("fleetshare") / "scenarios"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".yaml"))


@scenario_app.command("list")
def list_scenarios() -> None:
    """List the bundled example scenarios."""
    console = Console()
    for path in bundled_scenarios():
        console.print(path.stem, highlight=False)


def _resolve(name: str) -> Path:
    path = Path(name)
    if path.exists():
        return path
    for bundled in bundled_scenarios():
        if bundled.stem == name:
            return bundled
    raise typer.BadParameter(f"no file {name!r} and no bundled scenario of that name")


@scenario_app.command("run")
def run(
    files_: Annotated[
        list[str] | None, typer.Argument(metavar="FILE...", help="scenario files or names")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    all_bundled: Annotated[bool, typer.Option("--all", help="run every bundled scenario")] = False,
    check: Annotated[bool, typer.Option(help="check the scenario's expect block")] = True,
) -> None:
    """Run scenarios and print a timeline (or JSON); exit 1 if an expectation fails."""
    console = Console()
    paths = bundled_scenarios() if all_bundled else [_resolve(f) for f in files_ or []]
    if not paths:
        raise typer.BadParameter("name a scenario file, or use --all")
    failed = False
    outputs = {}
    for path in paths:
        try:
            result = run_scenario(load_scenario(path))
        except ScenarioError as exc:
            _fail(str(exc))
        data = to_json(result)
        problems = mismatches(result.scenario.expect, data) if check else []
        failed |= bool(problems)
        if as_json:
            outputs[path.stem] = data
        else:
            print_text(result, console)
            if result.scenario.expect and check:
                verdict = "[green]as expected[/]" if not problems else "[red]NOT as expected[/]"
                console.print(f"expectations: {verdict}")
            for problem in problems:
                console.print(f"  [red]✗[/] {problem}", highlight=False)
            console.print()
    if as_json:
        print(json.dumps(outputs[paths[0].stem] if len(paths) == 1 else outputs, indent=2))
    if failed:
        raise typer.Exit(1)


@app.command("plan")
def plan(
    pools: Annotated[Path, typer.Option("--pools", help="node pools (YAML: pools: [...])")],
    pending: Annotated[Path, typer.Option("--pending", help="pending workloads (YAML)")],
    nodes: Annotated[Path | None, typer.Option("--nodes", help="existing nodes (YAML)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """What the provisioner would launch now: the cheapest nodes for the pending pods."""
    from fleetshare.autoscaling.planning import describe, plan_to_json, run_plan

    try:
        result, shapes, fits_now = run_plan(pools, pending, nodes, load_catalog())
    except ScenarioError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(plan_to_json(result, shapes, fits_now), indent=2))
        return
    console = Console()
    table = Table(title="launch now", title_justify="left")
    for column in ("pool", "instance type", "zone", "capacity", "count", "$/h each", "$/h"):
        table.add_column(column)
    for launch in result.launches:
        table.add_row(
            launch.pool,
            launch.instance_type,
            launch.zone,
            launch.capacity_type,
            str(launch.count),
            f"{launch.price_per_hour:.4f}",
            f"{launch.price_per_hour * launch.count:.4f}",
        )
    console.print(table)
    bound = "LP lower bound" if result.bound_is_proven else "best bound found"
    console.print(
        f"total {result.hourly_cost:.4f} $/h; {bound} {result.lower_bound:.4f} $/h "
        f"(gap {result.gap:.2%}, {result.method}, {result.seconds:.2f}s)"
    )
    if any(launch.capacity_type == "spot" for launch in result.launches):
        console.print("[dim]spot prices are the simulated cloud's seeded model, not AWS quotes[/]")
    if fits_now:
        console.print(f"fit on existing nodes: {', '.join(fits_now)}")
    for index, reason in sorted(result.unplaceable.items()):
        shape = shapes[index]
        console.print(
            f"[red]cannot place[/] {describe(shape)} ({', '.join(shape.workloads)}): {reason}"
        )


if __name__ == "__main__":  # pragma: no cover
    app()
