"""The ``fleetshare`` command line."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
            Console(stderr=True).print(f"[red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None
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


if __name__ == "__main__":  # pragma: no cover
    app()
