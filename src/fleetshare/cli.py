"""The ``fleetshare`` command line."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import yaml
from rich.table import Table
from typer.core import TyperGroup

try:  # typer 0.2x carries a copy of click of its own, whose errors its commands raise
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - an older typer, on click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

# The engine (numpy, scipy, pydantic models) is imported inside the commands that run it,
# so that ``fleetshare --help`` and the client commands start fast.
from fleetshare import terminal
from fleetshare.inputs import InputError, parse_yaml, parse_yaml_all, read_text
from fleetshare.policy.errors import PolicyError
from fleetshare.policy.reading import DEFAULT_READING, BorrowLimitReading
from fleetshare.scenario.errors import ScenarioError

if TYPE_CHECKING:
    from rich.console import Console

    from fleetshare.model.catalog import Catalog
    from fleetshare.simulate.run import SimulationInput, VariantResult
    from fleetshare.simulate.variants import Variant

DEBUG_ENV = "FLEETSHARE_DEBUG"


class _App(typer.Typer):
    """The command line: an unexpected failure prints one line, not a traceback, unless
    ``--debug`` (or ``FLEETSHARE_DEBUG=1``) asks for it. Bad input has its own messages and
    exit code 2; a failed expectation exits 1."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        debug = "--debug" in sys.argv[1:] or os.environ.get(DEBUG_ENV) == "1"
        if "--debug" in sys.argv[1:]:
            sys.argv.remove("--debug")
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            if debug:
                raise
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            terminal.stderr().print(
                f"[red]error:[/] {message} (run with --debug for the traceback)",
                highlight=False,
            )
            raise SystemExit(1) from None


class _Commands(TyperGroup):
    """The command group. A usage error prints as click prints it, ``Error: <message>`` on
    one line, not in typer's box, which wraps the message at the width of a terminal (80
    columns in a pipe) and broke every script that greps it."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        call = (args, prog_name, complete_var, False, windows_expand_args)
        if not standalone_mode:
            return super().main(*call, **extra)
        try:
            code = super().main(*call, **extra)
        except click_errors.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        # without standalone mode, typer.Exit comes back as its exit code; a command that
        # returned normally comes back as its return value (None)
        sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

app = _App(
    cls=_Commands,
    help="fleetshare: fair sharing and right-sizing of shared accelerator clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)


def _version(value: bool) -> None:
    if value:
        from fleetshare import __version__

        print(f"fleetshare {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """fleetshare: fair sharing and right-sizing of shared accelerator clusters."""


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


class Reading(StrEnum):
    """How HyperPod's BorrowLimit is read (:mod:`fleetshare.policy.reading`)."""

    IDLE = "idle"
    QUOTA = "quota"

    def literal(self) -> BorrowLimitReading:
        return "idle" if self is Reading.IDLE else "quota"


DEFAULT_READING_OPTION = Reading(DEFAULT_READING)
ReadingOption = Annotated[
    Reading,
    typer.Option(
        help="HyperPod BorrowLimit as a percent of idle compute (as its API model says) or "
        "of the team's quota (as its walkthrough behaves)"
    ),
]


def _fail(message: str, code: int = 2) -> NoReturn:
    terminal.stderr().print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@policy_app.command("validate")
def validate_policy(
    path: Annotated[Path, typer.Argument(help="policy file (YAML or JSON)")],
) -> None:
    """Check a fleetshare policy; print what it resolves to, or each bad field and why."""
    from fleetshare.governance.quota import compile_policy
    from fleetshare.inputs import load_yaml
    from fleetshare.model.catalog import load_catalog
    from fleetshare.model.quantity import format_quantity
    from fleetshare.policy.schema import load_policy

    catalog = load_catalog()
    try:
        policy = load_policy(load_yaml(path), str(path))
        model = compile_policy(policy, catalog)
    except (PolicyError, InputError) as exc:
        _fail(str(exc))
    console = terminal.stdout()
    from fleetshare.autoscaling.disruption.types import plural

    teams, groups = plural(len(policy.teams), "team"), plural(len(policy.groups), "group")
    console.print(f"[green]valid:[/] {teams}, {groups}")
    if model.implicit_flavors:  # flavors are instance types: one the catalog lacks is a typo
        _warn_unknown_quota_types(policy, catalog)
    for name, node in model.nodes.items():
        quota = ", ".join(
            f"{res}={format_quantity(v, res)} on {flavor}{_instances(flavor, res, v, catalog)}"
            for (flavor, res), v in sorted(node.quota.items())
        )
        console.print(f"  {'team' if node.is_team else 'group'} {name}: {quota or 'no quota'}")


def _warn_unknown_quota_types(policy: Any, catalog: Catalog) -> None:
    """A warning (stderr) per quota on an instance type the catalog does not know: no node of
    a catalog type counts in it (custom node types may, so it is not an error)."""
    from fleetshare.policy.schema import DEFAULT_FLAVOR

    err = terminal.stderr()
    for kind, owners in (("groups", policy.groups), ("teams", policy.teams)):
        for i, owner in enumerate(owners):
            for j, entry in enumerate(owner.quota):
                if entry.flavor == DEFAULT_FLAVOR or entry.flavor in catalog:
                    continue
                try:
                    catalog.get(entry.flavor)
                except KeyError as exc:
                    err.print(
                        f"[yellow]warning:[/] {kind}[{i}]({owner.name}).quota[{j}]: "
                        f"{str(exc).strip(chr(34))} (no node of a known type counts in it)",
                        highlight=False,
                    )


def _instances(flavor: str, resource: str, amount: int, catalog: Catalog) -> str:
    """`` (2 instances)`` after an accelerator quota on an instance type: a quota above one
    instance is that many instances' worth (HyperPod allocates per instance group)."""
    if flavor not in catalog:
        return ""
    instance = catalog.get(flavor)
    per_instance = instance.allocatable.get(resource, 0)
    if resource != instance.accelerator_resource or not per_instance or not amount:
        return ""
    count = amount / per_instance
    return f" ({count:g} instance{'' if count == 1 else 's'})"


@policy_app.command("import")
def import_policy(
    source: Annotated[Source, typer.Argument(help="format of FILE")],
    path: Annotated[Path, typer.Argument(help="Kueue YAML or HyperPod JSON file")],
    borrow_limit_reading: ReadingOption = DEFAULT_READING_OPTION,
) -> None:
    """Convert a Kueue or HyperPod policy to fleetshare's format (YAML on stdout)."""
    from fleetshare.policy.hyperpod import import_hyperpod
    from fleetshare.policy.kueue import import_kueue

    try:
        text = read_text(path)
        if source == Source.KUEUE:
            policy = import_kueue(text)
        else:
            policy = import_hyperpod(text, borrow_limit_reading=borrow_limit_reading.literal())
    except (PolicyError, InputError) as exc:
        _fail(str(exc))
    data = policy.model_dump(mode="json", exclude_defaults=True)
    print(yaml.safe_dump(data, sort_keys=False), end="")
    for note in policy.notes:
        terminal.stderr().print(f"[yellow]note:[/] {note}", highlight=False)


class FieldFormat(StrEnum):
    """How ``fleetshare policy fields`` prints the field tables."""

    MARKDOWN = "markdown"
    JSON = "json"


@policy_app.command("fields")
def policy_fields(
    output: Annotated[
        FieldFormat, typer.Option("--format", help="markdown (docs/fields.md) or json")
    ] = FieldFormat.MARKDOWN,
    check: Annotated[
        Path | None,
        typer.Option(help="only check that this file holds the markdown (exit 1 if not)"),
    ] = None,
) -> None:
    """Print every field of the Kueue and HyperPod formats and what the importers do with it
    (as Kueue / as HyperPod, differs, refused, bookkeeping), from the tables they decide by."""
    from fleetshare.scenario.fields import SECTIONS, field_docs

    text = field_docs()
    if check is not None:
        current = check.read_text() if check.is_file() else None
        if current != text:
            _fail(f"{check} is not current (run fleetshare policy fields > {check})", code=1)
        print(f"{check} is up to date")
        return
    if output == FieldFormat.JSON:
        rows = [
            {"table": t.name, "source": t.source, "path": r.path, "verdict": r.verdict,
             "note": r.note}
            for _, _, tables in SECTIONS
            for t in tables
            for r in t.rules
        ]  # fmt: skip
        print(json.dumps(rows, indent=1))
        return
    print(text, end="")


def bundled_scenarios() -> list[Path]:
    """The example scenarios shipped with fleetshare."""
    folder = files("fleetshare") / "scenarios"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".yaml"))


@scenario_app.command("list")
def list_scenarios() -> None:
    """List the bundled example scenarios."""
    console = terminal.stdout()
    for path in bundled_scenarios():
        console.print(path.stem, highlight=False)


def _resolve(name: str, *, or_trace: bool = False) -> Path:
    """A scenario file or bundled scenario name; ``or_trace`` when a trace name would also do
    (the message lists the traces)."""
    path = Path(name)
    if path.exists():
        return path
    for bundled in bundled_scenarios():
        if bundled.stem == name:
            return bundled
    if or_trace:
        from fleetshare.traces import TRACES

        raise typer.BadParameter(
            f"no trace, file or bundled scenario {name!r}; traces: {', '.join(TRACES)}"
        )
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
    from fleetshare.scenario.expect import mismatches
    from fleetshare.scenario.loader import load_scenario
    from fleetshare.scenario.report import print_text, to_json

    console = terminal.stdout()
    paths = bundled_scenarios() if all_bundled else [_resolve(f) for f in files_ or []]
    if not paths:
        raise typer.BadParameter("name a scenario file, or use --all")
    failed = False
    outputs: dict[str, Any] = {}
    for path in paths:
        try:
            scenario = load_scenario(path)
            if scenario.spec.services:
                failed |= _run_services(path, scenario.expect, as_json, check, console, outputs)
                continue
            result = _run_with_progress(scenario)
        except ScenarioError as exc:
            _fail(str(exc))
        data = to_json(result)
        problems = mismatches(result.scenario.expect, data) if check else []
        failed |= bool(problems)
        if as_json:
            outputs[path.stem] = data
        else:
            print_text(result, console)
        _verdict(path, bool(result.scenario.expect and check), problems, as_json, console)
    if as_json:
        print(json.dumps(outputs[paths[0].stem] if len(paths) == 1 else outputs, indent=2))
    if failed:
        raise typer.Exit(1)


def _run_with_progress(scenario: Any) -> Any:
    """Run a scenario; on a terminal, a spinner with the simulated time shows on stderr after
    the first second (and disappears at the end)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from fleetshare.scenario.runner import ProgressRunner

    err = terminal.stderr()
    if not err.is_terminal:
        return ProgressRunner(scenario, None).run()
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    task = progress.add_task(f"running {scenario.name}", clock="t=0 s")
    shown = False

    def report(now: float) -> None:
        nonlocal shown
        if not shown:
            progress.start()
            shown = True
        progress.update(task, clock=f"t={now / 3600:,.2f} h simulated")

    try:
        return ProgressRunner(scenario, report, every=1.0).run()
    finally:
        if shown:
            progress.stop()


def _run_services(
    path: Path,
    expect: dict[str, object],
    as_json: bool,
    check: bool,
    console: Console,
    outputs: dict[str, Any],
) -> bool:
    """``scenario run`` of a scenario with services: every option it defines at once; True
    when an expectation failed."""
    from fleetshare.scenario.expect import mismatches
    from fleetshare.simulate.service_compare import run_as_written, table

    result, data = run_as_written(path)
    problems = mismatches(expect, data) if check else []
    if as_json:
        outputs[path.stem] = data
    else:
        console.print(table([result]))
    _verdict(path, bool(expect and check), problems, as_json, console)
    return bool(problems)


def _verdict(
    path: Path, checked: bool, problems: list[str], as_json: bool, console: Console
) -> None:
    """The expectations' verdict after a scenario's output; with ``--json`` only a failed one,
    on stderr (stdout keeps one JSON object)."""
    if as_json:
        if problems:
            err = terminal.stderr()
            err.print(f"{path.stem}: expectations: [red]NOT as expected[/]", highlight=False)
            for problem in problems:
                err.print(f"  [red]✗[/] {problem}", highlight=False)
        return
    if checked:
        verdict = "[green]as expected[/]" if not problems else "[red]NOT as expected[/]"
        console.print(f"expectations: {verdict}")
    for problem in problems:
        console.print(f"  [red]✗[/] {problem}", highlight=False)
    console.print()


@app.command("plan")
def plan(
    pools: Annotated[Path, typer.Option("--pools", help="node pools (YAML: pools: [...])")],
    pending: Annotated[Path, typer.Option("--pending", help="pending workloads (YAML)")],
    nodes: Annotated[Path | None, typer.Option("--nodes", help="existing nodes (YAML)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """What the provisioner would launch now: the cheapest nodes for the pending pods.

    Exit code 1 when some pods cannot be placed (the plan for the rest is still printed),
    2 for bad input.
    """
    from fleetshare.model.catalog import load_catalog
    from fleetshare.scenario.planning import describe, plan_to_json, run_plan

    try:
        result, shapes, fits_now = run_plan(pools, pending, nodes, load_catalog())
    except ScenarioError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(plan_to_json(result, shapes, fits_now), indent=2))
        if result.unplaceable:
            raise typer.Exit(1)
        return
    console = terminal.stdout()
    if not result.launches and not result.unplaceable:
        where = f"fit on existing nodes: {', '.join(fits_now)}" if fits_now else "no pending pods"
        console.print(f"nothing to launch: {where}", highlight=False)
        return
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
    if result.lower_bound > 0 or result.hourly_cost == 0:
        bound = "LP lower bound" if result.bound_is_proven else "best bound found"
        console.print(
            f"total {result.hourly_cost:.4f} $/h; {bound} {result.lower_bound:.4f} $/h "
            f"(gap {result.gap:.2%}, {result.method}, {result.seconds:.2f}s)"
        )
    else:  # a bound of 0 next to a positive cost says nothing
        console.print(
            f"total {result.hourly_cost:.4f} $/h; no lower bound found "
            f"({result.method}, {result.seconds:.2f}s)"
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
    if result.unplaceable:
        raise typer.Exit(1)


def _policy_help(*, default: bool = True) -> str:
    from fleetshare.simulate.showcase import DEFAULT_POLICIES
    from fleetshare.simulate.variants import VARIANTS

    text = "policy variant to compare (repeatable): " + ", ".join(VARIANTS)
    return text + (f". Default: {', '.join(DEFAULT_POLICIES)}" if default else "")


@app.command("simulate")
def simulate(
    scenario: Annotated[
        str | None,
        typer.Argument(
            metavar="SCENARIO",
            help="scenario file or bundled scenario name (default: the Helios showcase)",
        ),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace",
            metavar="NAME|FILE",
            help="a trace (helios, philly, alibaba, dlrm, kueue-generator) or a scenario YAML file",
        ),
    ] = None,
    policies: Annotated[
        list[str] | None, typer.Option("--policy", "-p", metavar="P", help=_policy_help())
    ] = None,
    placements: Annotated[
        list[str] | None,
        typer.Option(
            "--placement",
            metavar="PL",
            help="placement policy of pods on nodes and GPUs (repeatable; each variant runs "
            "once per value, named VARIANT+PL): default, first_fit, best_fit, fgd. Default: "
            "the input's cluster.placement",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="write an HTML report (index.html + PNG) here")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the metrics as JSON")] = False,
    days: Annotated[float | None, typer.Option(help="days of the trace to simulate")] = None,
    start_day: Annotated[float | None, typer.Option(help="first day of the trace window")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the trace and the cloud")] = None,
    options: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", metavar="KEY=VALUE", help="trace loader option"),
    ] = None,
    instance_type: Annotated[
        str | None,
        typer.Option(help="instance type standing for the nodes (prices, autoscaling)"),
    ] = None,
    job_kind: Annotated[
        str | None,
        typer.Option(
            help="label jobs training|batch|inference for the autoscaler, or auto (default: "
            "training for helios and philly, else auto)"
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(min=1, help="variants run in parallel (default: one per core)"),
    ] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="one comparison table with every column")
    ] = False,
    warm_capacity: Annotated[
        str | None,
        typer.Option(
            metavar="YAML",
            help="keep warm capacity ahead of forecast demand in -autoscale runs of a trace, "
            "e.g. '{horizon_seconds: 1800, quantile: 0.99}' ('{}' for the defaults)",
        ),
    ] = None,
    warm_history_days: Annotated[
        float,
        typer.Option(min=0, help="days of the trace before the window the forecaster starts from"),
    ] = 7.0,
) -> None:
    """Compare sharing policies on one trace or scenario: same workloads, same seed.

    With no arguments: the bundled showcase (the busiest three days of Helios Earth, on the
    seven teams that needed to borrow; fixed and autoscaled clusters). Prints comparison
    tables, in-window figures first, and the lender's view; --out writes an HTML report with
    charts and definitions; --json prints every metric per policy and per team.
    """
    from fleetshare.simulate.report import to_json as sim_json
    from fleetshare.simulate.report import write_report

    args = _SimulateArgs(
        scenario,
        trace,
        policies,
        placements,
        days,
        start_day,
        seed,
        options or [],
        instance_type,
        job_kind,
        warm_capacity,
        warm_history_days,
    )
    if scenario is not None and trace is not None:
        _fail("give a SCENARIO or --trace, not both")
    if out is not None:
        _report_folder(out)
    if _simulated_services(args, jobs, as_json, out):
        return
    inp, chosen = _simulation_input(args)
    chosen = _runnable(args, inp, chosen)
    results = _run_shown(inp, chosen, jobs)
    if as_json:
        print(json.dumps(sim_json(inp, results), indent=2))
    else:
        _print_comparison(inp, results, wide)
    if out is not None:
        paths = write_report(out, inp, results)
        terminal.stderr().print(
            f"report: {paths[0]} ({len(paths) - 1} more files)", highlight=False
        )


@dataclass(frozen=True)
class _SimulateArgs:
    """``simulate``'s options that choose its input and its policies, as given."""

    scenario: str | None
    trace: str | None
    policies: list[str] | None
    placements: list[str] | None
    days: float | None
    start_day: float | None
    seed: int | None
    options: list[str]
    instance_type: str | None
    job_kind: str | None
    warm_capacity: str | None
    warm_history_days: float

    @property
    def windowed(self) -> bool:
        """A trace window or loader option was given."""
        return bool(self.options) or self.days is not None or self.start_day is not None


def _simulated_services(
    args: _SimulateArgs, jobs: int | None, as_json: bool, out: Path | None
) -> bool:
    """``simulate`` of a scenario with services, when the input is one: True when it ran."""
    from fleetshare.scenario.loader import load_scenario
    from fleetshare.traces import TRACES

    ref = args.scenario if args.scenario is not None else args.trace
    if ref is None or ref in TRACES:
        return False
    try:
        path = _resolve(ref, or_trace=args.trace is not None)
        if not load_scenario(path).spec.services:
            return False
        if args.windowed or jobs is not None:
            _fail("--days, --start-day, --option and --jobs do not apply to services")
        _simulate_services(path, args.policies, as_json, out)
        return True
    except (ScenarioError, ValueError, TypeError, KeyError, FileNotFoundError) as exc:
        _fail(str(exc))
    except typer.BadParameter as exc:
        _fail(str(exc))


def _simulation_input(args: _SimulateArgs) -> tuple[SimulationInput, list[Variant]]:
    """The workloads and cluster to simulate, from a scenario file or a trace (the Helios
    showcase by default), and the policy variants chosen."""
    from fleetshare.simulate.showcase import DEFAULT_POLICIES
    from fleetshare.simulate.variants import select
    from fleetshare.traces import TRACES

    try:
        loader_options = _trace_options(args.options)
        chosen = select(args.policies or list(DEFAULT_POLICIES), args.placements or ())
        if args.scenario is not None or (args.trace is not None and args.trace not in TRACES):
            return _scenario_input(args, bool(loader_options)), chosen
        return _trace_input(args, loader_options), chosen
    except (ScenarioError, ValueError, TypeError, KeyError, FileNotFoundError) as exc:
        _fail(str(exc))
    except typer.BadParameter as exc:
        _fail(str(exc))


def _scenario_input(args: _SimulateArgs, loader_options: bool) -> SimulationInput:
    """The input of a scenario file (one without services)."""
    from fleetshare.simulate.run import from_scenario

    ref = args.scenario if args.scenario is not None else args.trace
    assert ref is not None
    if loader_options or args.days is not None or args.start_day is not None:
        _fail("--days, --start-day and --option apply to traces, not scenario files")
    if args.warm_capacity is not None:
        _fail("--warm-capacity applies to traces; a scenario sets its pools' own")
    return from_scenario(
        _resolve(ref), seed=args.seed, instance_type=args.instance_type, job_kind=args.job_kind
    )


def _trace_input(args: _SimulateArgs, loader_options: dict[str, object]) -> SimulationInput:
    """The input of a trace's window (the showcase's without ``--trace``), with the warm
    capacity setting of ``--warm-capacity``."""
    from fleetshare.simulate.run import from_trace
    from fleetshare.simulate.showcase import SHOWCASE_TRACE, showcase_options

    name = args.trace or SHOWCASE_TRACE
    if args.trace is None:
        opts = showcase_options(args.days, args.start_day)
    else:
        opts = {}
        if args.days is not None:
            opts["days"] = args.days
        if args.start_day is not None:
            opts["start_day"] = args.start_day
    opts.update(loader_options)
    inp = from_trace(
        name, opts, seed=args.seed, instance_type=args.instance_type, job_kind=args.job_kind
    )
    if args.warm_capacity is not None:
        inp.warm_capacity = _warm_setting(
            args.warm_capacity, name, opts, args.warm_history_days, inp.resource
        )
    return inp


def _runnable(args: _SimulateArgs, inp: SimulationInput, chosen: list[Variant]) -> list[Variant]:
    """The variants that can run on ``inp`` (without fixed nodes, only -autoscale ones), with
    a note on stderr for what is not used."""
    err = terminal.stderr()
    if args.warm_capacity is not None and not any(v.autoscale for v in chosen):
        err.print(
            "[yellow]note:[/] --warm-capacity applies to -autoscale policies; none chosen, "
            "so it is not used",
            highlight=False,
        )
    if not inp.nodes:
        skipped = [v.name for v in chosen if not v.autoscale]
        chosen = [v for v in chosen if v.autoscale]
        if skipped:
            err.print(f"[yellow]note:[/] no fixed nodes, skipped {', '.join(skipped)}")
        if not chosen:
            _fail("the input has no nodes: choose -autoscale policies")
    return chosen


def _run_shown(
    inp: SimulationInput, chosen: list[Variant], jobs: int | None
) -> list[VariantResult]:
    """Run the variants, ``jobs`` at a time (default: one per core), with a progress bar per
    variant on stderr."""
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from fleetshare.simulate.run import run_variants

    err = terminal.stderr()
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    total = max(inp.duration, 1.0)
    progress = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    tasks = {v.name: progress.add_task(v.name, total=total, clock="queued") for v in chosen}

    def report(name: str, now: float) -> None:
        clock = f"t={now / 3600:,.1f} h" + (" (draining)" if now > inp.duration else "")
        progress.update(tasks[name], completed=min(now, total), clock=clock)

    def start() -> None:
        progress.start()

    err.print(
        f"simulating {escape(inp.name)}: {len(inp.workloads):,} workloads, {len(chosen)} policies, "
        f"{min(workers, len(chosen))} at a time",
        highlight=False,
    )
    try:
        return run_variants(inp, chosen, jobs=workers, progress=report, on_start=start)
    except ScenarioError as exc:  # a run that cannot end (RunLimitError)
        progress.stop()
        _fail(str(exc))
    finally:
        progress.stop()


def _print_comparison(inp: SimulationInput, results: list[VariantResult], wide: bool) -> None:
    """The comparison tables, the lender's view right after the outcomes, the findings."""
    from fleetshare.simulate.report import coinciding, comparison_tables, findings, lender_table

    console = terminal.stdout()
    for r in results:
        if r.never_served:
            console.print(f"[bold red]{r.name}[/]: {r.never_served}", highlight=False)
    tables = comparison_tables(inp, results, wide)
    console.print(tables[0])
    lent = lender_table(inp, results)
    if lent is not None:  # the lender's view right after the outcomes
        console.print(lent)
    for table in tables[1:]:
        console.print(table)
    for line in findings(results):
        console.print(f"- {line}", highlight=False)
    for line in coinciding(results):
        console.print(f"[yellow]note[/]: {line}", highlight=False)


def _simulate_services(
    path: Path, policies: list[str] | None, as_json: bool, out: Path | None
) -> None:
    """``simulate`` of a scenario with services: the capacity options compared on the same
    traffic (``-p`` picks among reactive, headroom, scheduled, forecast, all)."""
    from fleetshare.simulate.service_charts import write_charts
    from fleetshare.simulate.service_compare import OPTIONS, compare, table
    from fleetshare.simulate.service_compare import to_json as services_json

    chosen = policies or list(OPTIONS)
    unknown = [p for p in chosen if p not in OPTIONS]
    if unknown:
        _fail(f"--policy {', '.join(unknown)}: for services, choose from {', '.join(OPTIONS)}")
    results, notes = compare(path, chosen)
    data = services_json(path.stem, results, notes)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        console = terminal.stdout()
        console.print(table(results))
        for name, row in data["versus_reactive"].items():
            fewer = row["fewer_capacity_short_minutes_x"]
            slo = ""
            if "slo_violation_minutes" in row:
                fewer_slo = row["fewer_slo_violation_minutes_x"]
                slo = (
                    f"{row['slo_violation_minutes']} SLO-violation minutes "
                    f"({'none' if fewer_slo is None else f'{fewer_slo}x fewer than reactive'}; "
                    f"{row['requests_missed_slo_share']} of requests missed the SLO), "
                )
            console.print(
                f"{name}: {slo}{row['capacity_short_minutes']} capacity-short minutes "
                f"({'none' if fewer is None else f'{fewer}x fewer than reactive'}), "
                f"{row['extra_gpu_hours']:+} GPU-hours ({row['extra_gpu_hours_percent']:+}%)",
                highlight=False,
            )
        for note in notes:
            console.print(f"[yellow]note[/]: {note}", highlight=False)
    if out is not None:
        (out / "services.json").write_text(json.dumps(data, indent=2))
        for written in write_charts(out, path.stem, results):
            terminal.stderr().print(f"wrote {written}", highlight=False)


def _report_folder(out: Path) -> None:
    """Make sure ``--out`` is a folder the report can be written to, before the run (a run of
    minutes should not end in an error about where to write)."""
    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"--out {out}: cannot create the folder ({exc.strerror or exc})")
    if not os.access(out, os.W_OK | os.X_OK):
        _fail(f"--out {out}: the folder is not writable")


@app.command("sweep")
def sweep_command(
    trace: Annotated[str, typer.Option("--trace", metavar="NAME", help="a trace (helios, ...)")],
    out: Annotated[Path, typer.Option("--out", help="folder for runs.parquet and teams.parquet")],
    policies: Annotated[
        list[str], typer.Option("--policy", "-p", metavar="P", help=_policy_help(default=False))
    ],
    params: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            metavar="NAME=V1,V2",
            help="values of a parameter: borrow_limit (50%, 8, none), min_runtime (seconds), "
            "fair_share_weight.TEAM",
        ),
    ] = None,
    seeds: Annotated[list[int] | None, typer.Option("--seed", help="seeds (default 0)")] = None,
    days: Annotated[float | None, typer.Option(help="days of the trace to simulate")] = None,
    start_day: Annotated[float | None, typer.Option(help="first day of the trace window")] = None,
    options: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", metavar="KEY=VALUE", help="trace loader option"),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(min=1, help="runs at a time (default: one per core)")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="run on this Ray cluster (host:port, auto, or local for a fresh one here)",
        ),
    ] = None,
) -> None:
    """Run policies x parameters x seeds over a trace; write the metrics to Parquet.

    Every combination runs as one simulation, in worker processes (or on a Ray cluster with
    --ray). One row per run goes to OUT/runs.parquet, one per run and team to
    OUT/teams.parquet.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fleetshare.simulate.api import Sweep, frame
    from fleetshare.simulate.sweep import points, run_sweep
    from fleetshare.traces import trace_options

    _report_folder(out)
    try:
        trace_options(trace)  # an unknown trace is refused before the sweep starts
        opts = _trace_options(options or [])
        if days is not None:
            opts["days"] = days
        if start_day is not None:
            opts["start_day"] = start_day
        grid: dict[str, list[Any]] = {}
        for item in params or []:
            name, sep, text = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"--param wants NAME=V1,V2,..., got {item!r}")
            values = text.split(",")
            if any(not v.strip() for v in values):
                hint = " (write none for no limit)" if name.strip() == "borrow_limit" else ""
                raise ValueError(f"sweep parameter {name.strip()}: an empty value{hint}")
            grid[name.strip()] = [parse_yaml(v, f"--param {name.strip()}") for v in values]
        sweep_points = points(policies, grid, seeds or [0])
    except (ValueError, TypeError) as exc:
        _fail(str(exc))
    err = terminal.stderr()
    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    task = progress.add_task("sweep", total=len(sweep_points), last="")
    workers = 1 if ray is not None else jobs or os.cpu_count() or 1
    where = f"on Ray ({ray})" if ray is not None else f"{min(workers, len(sweep_points))} at a time"
    err.print(f"sweeping {trace}: {len(sweep_points):,} runs, {where}", highlight=False)
    with progress:
        try:
            runs, teams = run_sweep(
                trace,
                opts,
                sweep_points,
                jobs=workers,
                ray_address=ray,
                done=lambda p: progress.update(task, advance=1, last=p.label()),
            )
        except (ScenarioError, ValueError, TypeError, KeyError) as exc:
            _fail(str(exc))
    paths = Sweep(runs=frame(runs), teams=frame(teams)).to_parquet(out)
    print(f"{len(runs):,} runs: {paths[0]}, {paths[1]}")


# -- the service ---------------------------------------------------------------------------------

token_app = typer.Typer(
    help="API tokens of a fleetshare service (works on its store directly).", no_args_is_help=True
)
app.add_typer(token_app, name="token")
team_app = typer.Typer(help="Teams of a fleetshare service (over HTTP).", no_args_is_help=True)
app.add_typer(team_app, name="team")
job_app = typer.Typer(help="Workloads of a fleetshare service (over HTTP).", no_args_is_help=True)
app.add_typer(job_app, name="job")
service_app = typer.Typer(
    help="Live services of a fleetshare service (over HTTP).", no_args_is_help=True
)
app.add_typer(service_app, name="service")
nodes_app = typer.Typer(
    help="Nodes of a fleetshare service (over HTTP; no subcommand: list them).",
    invoke_without_command=True,
)
app.add_typer(nodes_app, name="nodes")
nodepools_app = typer.Typer(
    help="Node pools of a fleetshare service (over HTTP).", no_args_is_help=True
)
app.add_typer(nodepools_app, name="nodepools")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="database URL (default $FLEETSHARE_DB, else sqlite:///$XDG_DATA_HOME/fleetshare/"
        "fleetshare.db)",
    ),
]
ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server", envvar="FLEETSHARE_SERVER", help="service URL [default: http://127.0.0.1:8080]"
    ),
]
TokenOption = Annotated[
    str | None, typer.Option("--token", envvar="FLEETSHARE_TOKEN", help="API bearer token")
]
CaCertOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-cert",
        envvar="FLEETSHARE_CA_CERT",
        help="trust the server's certificate when this CA (a PEM file) signed it, for an "
        "https --server (default: the system's CAs)",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]


@app.command("serve")
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="cluster config: a scenario file without workloads (default: a bundled "
            "four-node cluster with two teams)",
        ),
    ] = None,
    db: DbOption = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port to listen on")] = 8080,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert",
            help="serve https with this certificate (PEM; the server's first, then its chain); "
            "with --tls-key",
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", help="the certificate's private key (PEM, unencrypted)"),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="believe X-Forwarded-Proto and X-Forwarded-For from these proxies: IPs or "
            "networks, comma-separated, or * [default: $FORWARDED_ALLOW_IPS, else 127.0.0.1]",
        ),
    ] = None,
    root_path: Annotated[
        str,
        typer.Option(
            help="the path prefix a reverse proxy serves the API under, e.g. /fleetshare (the "
            "proxy strips it)"
        ),
    ] = "",
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    loop_in_process: Annotated[
        bool,
        typer.Option(
            "--loop-in-process",
            help="run the control loop in this process (a thread) instead of a process of "
            "its own started and supervised by this one",
        ),
    ] = False,
    stale_seconds: Annotated[
        float,
        typer.Option(
            min=1,
            help="a control loop that has not gone round (or reported) for this long is "
            "unhealthy: /healthz 503, fleetshare_loop_up and fleetshare_leader 0",
        ),
    ] = 15.0,
    role: Annotated[
        str, typer.Option(hidden=True, help="'loop': the loop process, no HTTP (internal)")
    ] = "",
) -> None:
    """Run the control plane: the control loop on the wall clock over an embedded cluster,
    its state in a database, and the REST API (OpenAPI at /openapi.json) and /metrics.
    The loop runs in a child process this one supervises (see docs/service.md)."""
    from fleetshare.service.config import load_config
    from fleetshare.service.store import DB_ENV, Store, default_url

    if role not in ("", "loop"):
        _fail(f"--role: 'loop' or nothing, not {role!r}")
    try:
        scenario = load_config(config)
    except ScenarioError as exc:
        _fail(str(exc))
    from fleetshare.service import proxy, tls
    from fleetshare.service.loop_process import LoopProcess, child_command, run_child
    from fleetshare.service.plane import ControlPlane
    from fleetshare.service.runtime import tune_garbage_collector

    try:
        tls_files = tls.server_files(tls_cert, tls_key)
        trusted = proxy.forwarded_allow_ips(forwarded_allow_ips)
        prefix = proxy.root_path(root_path)
    except (tls.TlsError, proxy.ProxyError) as exc:
        _fail(str(exc))
    if role == "loop":
        plane = ControlPlane(scenario, Store(db), mode="loop", stale_seconds=stale_seconds)
        tune_garbage_collector()
        raise typer.Exit(run_child(plane))
    loop_process = None
    if not loop_in_process:  # started first: it loads while this process does
        env = dict(os.environ)
        env[DB_ENV] = db or default_url()  # not on the command line: it may hold a password
        loop_process = LoopProcess(child_command(config, stale_seconds), env, stale_seconds)
        loop_process.start()
    try:
        import uvicorn

        from fleetshare.service.api import create_app

        plane = ControlPlane(
            scenario,
            Store(db),
            mode="api" if loop_process else "all",
            stale_seconds=stale_seconds,
        )
        if loop_process is not None:
            try:
                loop_process.wait_ready()
            except RuntimeError as exc:
                _fail(str(exc))
            loop_process.attach(plane)
        tune_garbage_collector()
        where = f"loop process {loop_process.pid}" if loop_process else plane.role()
        terminal.stderr().print(
            f"fleetshare serving on {'https' if tls_files else 'http'}://{host}:{port} (store "
            f"{plane.store.display_url}, "
            f"{where})",
            highlight=False,
        )
        # open event streams (the dashboard's) end within seconds of a shutdown
        uvicorn.run(
            create_app(
                plane,
                loop_metrics=loop_process.metrics if loop_process else None,
                on_stop=loop_process.stop if loop_process else None,
            ),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=3,
            ssl_certfile=tls_files[0] if tls_files else None,
            ssl_keyfile=tls_files[1] if tls_files else None,
            forwarded_allow_ips=trusted,
            root_path=prefix,
        )
    finally:  # uvicorn may end the process before this (it re-raises SIGTERM): stdin ends
        if loop_process is not None:
            loop_process.stop()


@token_app.command("create")
def token_create(
    scope: Annotated[str, typer.Option("--scope", help="admin, viewer or team:NAME")],
    name: Annotated[str, typer.Option("--name", help="a note: whose token this is")] = "",
    db: DbOption = None,
) -> None:
    """Create a token; it is printed once (the store keeps only its SHA-256 hash)."""
    from fleetshare.service.auth import ScopeError, create_token
    from fleetshare.service.store import Store

    store = Store(db)
    store.create()
    try:
        token_id, token = create_token(store, scope, name)
    except ScopeError as exc:
        _fail(str(exc))
    terminal.stderr().print(f"token {token_id} ({scope}); keep it, it is not shown again:")
    print(token)


@token_app.command("list")
def token_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """List tokens (ids, scopes, names; never the tokens)."""
    from fleetshare.service.auth import list_tokens
    from fleetshare.service.store import Store

    store = Store(db)
    store.create()
    tokens = list_tokens(store)
    if as_json:
        print(json.dumps(tokens, indent=2))
        return
    table = Table()
    for column in ("id", "scope", "name", "created", "revoked"):
        table.add_column(column)
    for t in tokens:
        table.add_row(
            str(t["id"]),
            t["scope"],
            t["name"],
            _when(t["created_at"]),
            _when(t["revoked_at"]) if t["revoked_at"] else "",
        )
    terminal.stdout().print(table)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int, typer.Argument(metavar="ID", help="the token's id")],
    db: DbOption = None,
) -> None:
    """Revoke a token (requests with it get 401 from then on)."""
    from fleetshare.service.auth import revoke_token
    from fleetshare.service.store import Store

    store = Store(db)
    store.create()
    if not revoke_token(store, token_id):
        _fail(f"no active token {token_id}", 1)
    terminal.stderr().print(f"token {token_id} revoked")


def _when(moment: str | float | None) -> str:
    """A time from the API (ISO 8601 text, or Unix seconds) as people read it, with its zone:
    ``2026-12-06 20:26:29 UTC``."""
    from datetime import UTC, datetime

    if moment is None or moment == "":
        return ""
    if isinstance(moment, str):
        parsed = datetime.fromisoformat(moment)
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    else:
        parsed = datetime.fromtimestamp(moment, UTC)
    return parsed.strftime("%Y-%m-%d %H:%M:%S UTC")


def _client(server: str | None, token: str | None, ca_cert: Path | None) -> Any:
    """A client of the server; an unusable ``--ca-cert`` prints one line and exits 2."""
    from fleetshare.service.client import Client
    from fleetshare.service.tls import TlsError

    try:
        return Client(server, token, ca_cert=ca_cert)
    except TlsError as exc:
        _fail(str(exc))


def _call(server: str | None, token: str | None, ca_cert: Path | None, what: Any) -> Any:
    """Run ``what(client)``; a failed request prints one line and exits 1."""
    from fleetshare.service.client import ClientError

    client = _client(server, token, ca_cert)
    try:
        return what(client)
    except ClientError as exc:
        _fail(str(exc), 1)
    finally:
        client.close()


def _amounts(vector: dict[str, Any]) -> str:
    """Amounts in base units (the API's numbers) as quantities: ``memory=231.08Gi``."""
    from fleetshare.model.quantity import format_amounts

    return format_amounts(vector)


@team_app.command("list")
def team_list(
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Teams with quota, usage and borrowing per resource."""
    teams = _call(server, token, ca_cert, lambda c: c.teams())
    if as_json:
        print(json.dumps(teams, indent=2))
        return
    table = Table()
    for column in ("team", "cohort", "quota", "used", "borrowed", "pending", "admitted"):
        table.add_column(column)
    for t in teams:
        table.add_row(
            t["name"],
            t["cohort"] or "",
            _amounts(t["quota"]),
            _amounts(t["used"]),
            _amounts(t["borrowed"]),
            str(t["pending"]),
            str(t["admitted"]),
        )
    terminal.stdout().print(table)


@team_app.command("show")
def team_show(
    name: Annotated[str, typer.Argument(help="team name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """One team, per flavor."""
    team = _call(server, token, ca_cert, lambda c: c.team(name))
    if as_json:
        print(json.dumps(team, indent=2))
        return
    console = terminal.stdout()
    console.print(
        f"[bold]{team['name']}[/] (cohort {team['cohort'] or '-'}): {team['pending']} pending, "
        f"{team['admitted']} admitted"
    )
    table = Table()
    for column in ("flavor", "quota", "used", "borrowed"):
        table.add_column(column)
    for flavor, kinds in team["by_flavor"].items():
        table.add_row(flavor, *(_amounts(kinds.get(k, {})) for k in ("quota", "used", "borrowed")))
    console.print(table)


@team_app.command("set")
def team_set(
    name: Annotated[str, typer.Argument(help="team name")],
    path: Annotated[
        Path,
        typer.Option(
            "--file",
            "-f",
            help="the team as in a fleetshare policy's teams list (YAML or JSON; '-' reads "
            "stdin); a name in it must be NAME",
        ),
    ],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
) -> None:
    """Add or replace one team of the policy in force (admin token): a new policy version."""
    where = "stdin" if str(path) == "-" else str(path)
    try:
        team = parse_yaml(sys.stdin.read() if where == "stdin" else read_text(path), where)
    except InputError as exc:
        _fail(str(exc))
    if not isinstance(team, dict):
        _fail(f"{where}: must hold one team (a mapping)")
    if team.get("name", name) != name:
        _fail(f"{where}: names team {team.get('name')!r}, not {name!r}")
    status, out = _call(server, token, ca_cert, lambda c: c.set_team(name, team))
    what = "added" if status == 201 else "replaced"
    terminal.stdout().print(f"team {name} {what}: policy version {out['version']}")


@team_app.command("remove")
def team_remove(
    name: Annotated[str, typer.Argument(help="team name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
) -> None:
    """Remove one team from the policy in force (admin token; refused while it has work)."""
    out = _call(server, token, ca_cert, lambda c: c.remove_team(name))
    terminal.stdout().print(f"team {name} removed: policy version {out['version']}")


@job_app.command("submit")
def job_submit(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE", help="workload spec(s) or Kubernetes manifests: YAML or JSON, read here"
        ),
    ],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Submit workloads from FILE: a native spec, a list of specs, {workloads: [...]}, or
    Kubernetes objects (Job, PyTorchJob, JobSet, RayJob, RayCluster, pods of a pod group;
    several YAML documents: one submission per object, a pod group's pods together)."""
    from fleetshare.service.client import split_submissions

    try:
        docs = parse_yaml_all(read_text(path), str(path))
        bodies = split_submissions(docs)
    except InputError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(f"{path}: {exc}")
    from fleetshare.service.client import ClientError

    submitted: list[dict[str, Any]] = []
    client = _client(server, token, ca_cert)
    try:
        for i, body in enumerate(bodies):
            try:
                submitted.append(client.submit(body))
            except ClientError as exc:
                done = f" ({len(submitted)} submitted before it)" if submitted else ""
                _fail(f"workload {i + 1} of {len(bodies)}{done}: {exc}", 1)
    finally:
        client.close()
    if as_json:
        print(json.dumps(submitted if len(submitted) > 1 else submitted[0], indent=2))
        return
    for wl in submitted:
        terminal.stdout().print(f"submitted {wl['name']} (team {wl['team']})", highlight=False)
        for note in wl.get("notes", []):
            terminal.stderr().print(f"  note: {note}", highlight=False)


@job_app.command("list")
def job_list(
    team: Annotated[str | None, typer.Option(help="only this team's")] = None,
    state: Annotated[
        str | None, typer.Option(help="pending, admitted, finished or cancelled")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many")] = None,
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Workloads in submit order."""
    items = _call(server, token, ca_cert, lambda c: c.workloads(team, state, limit))
    if as_json:
        print(json.dumps(items, indent=2))
        return
    table = Table()
    for column in ("workload", "team", "state", "pods", "submitted", "admitted", "nodes", "why"):
        table.add_column(column)
    for w in items:
        why = w["pending_reason"] or ""
        if w["queue_position"]:
            why = f"#{w['queue_position']}: {why}"
        table.add_row(
            w["name"],
            w["team"],
            w["state"],
            str(w["pods"]),
            _when(w["submitted_at"]),
            _when(w["admitted_at"]),
            ", ".join(w["nodes"]),
            why,
        )
    terminal.stdout().print(table)


@job_app.command("cancel")
def job_cancel(
    name: Annotated[str, typer.Argument(help="workload name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a pending or admitted workload."""
    out = _call(server, token, ca_cert, lambda c: c.cancel(name))
    if as_json:
        print(json.dumps(out, indent=2))
        return
    terminal.stdout().print(f"cancelled {out['name']}", highlight=False)


@job_app.command("explain")
def job_explain(
    name: Annotated[str, typer.Argument(help="workload name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why a workload waits (with numbers) and its place in its team's queue."""
    out = _call(server, token, ca_cert, lambda c: c.explain(name))
    if as_json:
        print(json.dumps(out, indent=2))
        return
    console = terminal.stdout()
    line = f"[bold]{out['name']}[/] (team {out['team']}): {out['state']}"
    if out["queue_position"]:
        line += f", #{out['queue_position']} in its team's queue"
    console.print(line, highlight=False)
    if out["reason"]:
        console.print(f"  {out['reason']}", highlight=False)
    if out["nodes"]:
        console.print(f"  on {', '.join(out['nodes'])} ({', '.join(out['flavors'])})")


def _service_row(s: dict[str, Any]) -> list[str]:
    decided = "" if s.get("wanted") is None else f"{s['wanted']} ({s['why']})"
    return [
        s["name"],
        s["team"],
        str(len(s["replicas"])),
        decided,
        s.get("error") or "",
    ]


@service_app.command("list")
def service_list(
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Services in registration order, with their replicas and the scaler's last decision
    (the leader's; a follower shows none)."""
    items = _call(server, token, ca_cert, lambda c: c.services())
    if as_json:
        print(json.dumps(items, indent=2))
        return
    table = Table()
    for column in ("service", "team", "replicas", "last decision", "error"):
        table.add_column(column)
    for s in items:
        table.add_row(*_service_row(s))
    terminal.stdout().print(table)


@service_app.command("show")
def service_show(
    name: Annotated[str, typer.Argument(help="service name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """One service: its scaler, replicas and last decision."""
    s = _call(server, token, ca_cert, lambda c: c.service(name))
    if as_json:
        print(json.dumps(s, indent=2))
        return
    console = terminal.stdout()
    scaler = s["spec"]["scaler"]
    console.print(
        f"[bold]{s['name']}[/] (team {s['team']}), registered {_when(s['created_at'])} by "
        f"{s['created_by']}",
        highlight=False,
    )
    console.print(
        f"  replicas {scaler.get('min_replicas', 0)}..{scaler.get('max_replicas', 100)}, "
        f"polling every {scaler.get('polling_interval_seconds', 15)} s",
        highlight=False,
    )
    table = Table()
    for column in ("trigger", "target", "query"):
        table.add_column(column)
    for t in scaler["triggers"]:
        prom = t.get("prometheus") or {}
        table.add_row(
            t["metric"],
            f"{t['target']:g}",
            f"{prom.get('server') or prom.get('server_address')} {prom.get('query')}",
        )
    console.print(table)
    if s.get("wanted") is not None:
        console.print(f"  last decision: {s['wanted']} ({s['why']})", highlight=False)
    if s.get("error"):
        console.print(f"  [red]error:[/] {s['error']}", highlight=False)
    console.print(f"  replicas: {', '.join(s['replicas']) or 'none'}", highlight=False)


@service_app.command("apply")
def service_apply(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="a native service spec, or a Deployment with its KEDA ScaledObject or HPA "
            "(YAML or JSON, read here)",
        ),
    ],
    team: Annotated[
        str | None, typer.Option(help="the service's team (overrides the file)")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Register the service in FILE, or change the one of that name in place (its replicas
    stay; the scaler carries on under the new rules). A manifest's team: --team, else its
    fleetshare.io/team label, else a team token's."""
    from fleetshare.service.service_files import service_body

    text = read_text(path)

    def register(client: Any) -> tuple[dict[str, Any], bool, list[str]]:
        default = None if team is not None else client.whoami().get("team")
        try:
            body, notes = service_body(text, str(path), team, default)
        except InputError as exc:
            _fail(str(exc))
        return *client.apply_service(body), notes

    out, created, notes = _call(server, token, ca_cert, register)
    if as_json:
        print(json.dumps(out, indent=2))
        return
    done = "registered" if created else "updated"
    terminal.stdout().print(f"{done} service {out['name']} (team {out['team']})", highlight=False)
    for note in notes:
        terminal.stderr().print(f"  note: {note}", highlight=False)


@service_app.command("delete")
def service_delete(
    name: Annotated[str, typer.Argument(help="service name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a service and cancel its replicas."""
    out = _call(server, token, ca_cert, lambda c: c.delete_service(name))
    if as_json:
        print(json.dumps(out, indent=2))
        return
    terminal.stdout().print(f"deleted service {out['name']}", highlight=False)


@nodes_app.callback()
def nodes_command(
    ctx: typer.Context,
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """A fleetshare service's nodes (over HTTP): listed without a subcommand."""
    if ctx.invoked_subcommand is None:
        nodes_list(server, token, ca_cert, as_json)


@nodes_app.command("list")
def nodes_list(
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """The nodes, their state and price, and the work on each."""
    items = _call(server, token, ca_cert, lambda c: c.nodes())
    if as_json:
        print(json.dumps(items, indent=2))
        return
    table = Table()
    for column in ("node", "instance type", "zone", "capacity", "source", "ready", "$/h", "work"):
        table.add_column(column)
    for n in items:
        price = n["price_per_hour"]
        state = "cordoned" if n["cordoned"] else ("yes" if n["schedulable"] else "no")
        table.add_row(
            n["name"],
            n["instance_type"] or "",
            n["zone"] or "",
            n["capacity_type"],
            n["source"] + (f" ({n['pool']})" if n["pool"] else ""),
            state,
            "" if price is None else f"{price:.3f}",
            ", ".join(n["workloads"]),
        )
    terminal.stdout().print(table)


def _node_action(
    action: str,
    name: str,
    server: str | None,
    token: str | None,
    ca_cert: Path | None,
    as_json: bool,
) -> None:
    out = _call(server, token, ca_cert, lambda c: c.node_action(name, action))
    if as_json:
        print(json.dumps(out, indent=2))
        return
    terminal.stdout().print(
        f"{action} {out['node']}: sent (the loop applies it at once)", highlight=False
    )


@nodes_app.command("cordon")
def nodes_cordon(
    name: Annotated[str, typer.Argument(help="node name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """No new work on NODE (admin); what runs there stays."""
    _node_action("cordon", name, server, token, ca_cert, as_json)


@nodes_app.command("uncordon")
def nodes_uncordon(
    name: Annotated[str, typer.Argument(help="node name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """NODE takes work again (admin)."""
    _node_action("uncordon", name, server, token, ca_cert, as_json)


@nodes_app.command("drain")
def nodes_drain(
    name: Annotated[str, typer.Argument(help="node name")],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cordon NODE and requeue its work (admin)."""
    _node_action("drain", name, server, token, ca_cert, as_json)


def _print_pools(out: dict[str, Any]) -> None:
    console = terminal.stdout()
    where = "the config file" if out["source"] == "config" else f"version {out['version']}"
    by = f" by {out['author']} at {_when(out['created_at'])}" if out["author"] else ""
    console.print(f"node pools of {where}{by}", highlight=False)
    table = Table()
    for column in ("pool", "instance types", "capacity", "nodes", "used", "limits"):
        table.add_column(column)
    for p in out["pools"]:
        spec = p["spec"]
        kinds = spec.get("instance_types") or spec.get("families") or spec.get("gpu_models")
        table.add_row(
            p["name"],
            ", ".join(kinds) if kinds else "any",
            ", ".join(spec.get("capacity_types", ["on-demand"])),
            str(p["nodes"]),
            _amounts({k: v for k, v in p["used"].items() if k != "nodes"}),
            _amounts(p["limits"]),
        )
    console.print(table)


@nodepools_app.command("list")
def nodepools_list(
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """The node pools in force, each with its nodes and what they hold against its limits."""
    out = _call(server, token, ca_cert, lambda c: c.nodepools())
    if as_json:
        print(json.dumps(out, indent=2))
        return
    _print_pools(out)


@nodepools_app.command("apply")
def nodepools_apply(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE", help="every node pool: {pools: [...]}, a list, or one pool (YAML/JSON)"
        ),
    ],
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replace every node pool of the service with FILE's (admin; pools left out launch no
    more). From then on these win over the config file's, also after a restart."""
    from fleetshare.service.client import pools_of

    try:
        pools = pools_of(parse_yaml(read_text(path), str(path)))
    except InputError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(f"{path}: {exc}")
    out = _call(server, token, ca_cert, lambda c: c.set_nodepools(pools))
    if as_json:
        print(json.dumps(out, indent=2))
        return
    _print_pools(out)


@app.command("events")
def events_command(
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="keep printing new events (a server-sent event stream)"
        ),
    ] = False,
    after: Annotated[int, typer.Option(min=0, help="start after this event id")] = 0,
    server: ServerOption = None,
    token: TokenOption = None,
    ca_cert: CaCertOption = None,
    as_json: JsonOption = False,
) -> None:
    """A fleetshare service's event log (over HTTP); --follow then streams new events
    (/api/v1/events/stream), resuming where it was when the connection drops."""
    from fleetshare.service.client import ClientError

    console = terminal.stdout()

    def show(event: dict[str, Any]) -> None:
        if as_json:
            print(json.dumps(event), flush=True)
            return
        details = " ".join(f"{k}={v}" for k, v in event["details"].items())
        who = event["workload"] or ""
        console.print(
            f"{event['id']:>6} {_when(event['at'])} {event['kind']:<9} {who} {details}",
            highlight=False,
        )

    client = _client(server, token, ca_cert)
    try:
        while True:
            page = client.events(after=after)
            for event in page["items"]:
                after = event["id"]
                show(event)
            if page["next_after"] is None:
                break
        if follow:
            for event in client.follow_events(after):
                show(event)
    except ClientError as exc:
        _fail(str(exc), 1)
    except KeyboardInterrupt:
        return
    finally:
        client.close()


def _warm_setting(
    text: str, trace: str, options: dict[str, Any], history_days: float, resource: str
) -> Any:
    """``--warm-capacity``: the setting, with the trace's demand of the ``history_days``
    before its window as the forecaster's history (unless the setting gives one)."""
    from pydantic import ValidationError

    from fleetshare.autoscaling.warm import WarmCapacity
    from fleetshare.policy.schema import validation_problems
    from fleetshare.simulate.run import demand_before

    data = parse_yaml(text, "--warm-capacity")
    if not isinstance(data, dict):
        raise ValueError("--warm-capacity: give a mapping, e.g. '{horizon_seconds: 1800}'")
    try:
        setting = WarmCapacity.model_validate(data)
    except ValidationError as exc:
        why = "; ".join(f"{path}: {reason}" for path, reason in validation_problems(exc, data))
        raise ValueError(f"--warm-capacity: {why}") from None
    if "history" not in data and history_days > 0:
        history = demand_before(trace, options, history_days, setting.resource or resource)
        setting = setting.model_copy(update={"history": history})
    return setting


def _trace_options(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--option wants KEY=VALUE, got {item!r}")
        out[key.strip()] = parse_yaml(text, f"--option {key.strip()}")
    return out


# -- the Kubernetes operator ---------------------------------------------------------------------

operator_app = typer.Typer(
    help="Govern a Kubernetes cluster (run with no subcommand to start the operator).",
    invoke_without_command=True,
)
app.add_typer(operator_app, name="operator")


@operator_app.callback()
def operator_run(
    ctx: typer.Context,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            "--kubeconfig",
            help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)",
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", "-n", help="govern workloads of this namespace (repeat; default: all)"
        ),
    ] = None,
    lease_namespace: Annotated[
        str, typer.Option(help="namespace of the leader-election Lease")
    ] = "default",
    leader_elect: Annotated[bool, typer.Option(help="elect a leader among replicas")] = True,
    install_crds: Annotated[bool, typer.Option(help="create or update the CRDs at start")] = True,
    webhook_port: Annotated[
        int | None,
        typer.Option(
            help="serve the pod-gating admission webhook on this loopback port and "
            "register it (for an operator outside the cluster)"
        ),
    ] = None,
    cloud: Annotated[
        str,
        typer.Option(
            help="where NodePools launch nodes: 'none' (no autoscaling) or 'simulated' (the "
            "simulated cloud: NodeClaims are written, nodes must be registered by someone else)"
        ),
    ] = "none",
    registration_timeout: Annotated[
        float,
        typer.Option(help="seconds a launched node has to register before its claim goes"),
    ] = 900.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="serve Prometheus metrics (/metrics) and the kubelet's probes (/healthz, "
            "/readyz) on this port (all addresses)"
        ),
    ] = None,
    stale_seconds: Annotated[
        float,
        typer.Option(
            help="/healthz answers 503 when the operator's loop has not gone round for this "
            "long (a liveness probe then restarts it)"
        ),
    ] = 60.0,
    webhook_cert_dir: Annotated[
        Path | None,
        typer.Option(
            help="in a cluster: serve the webhook on all addresses with tls.crt and tls.key "
            "from this directory (a mounted Secret) and leave its configuration to the Helm "
            "chart; --webhook-port gives the port"
        ),
    ] = None,
    scaled_objects: Annotated[
        bool,
        typer.Option(
            help="scale the Deployments of KEDA ScaledObjects from their Prometheus triggers "
            "(where KEDA's CRD is installed; do not run KEDA's operator beside it)"
        ),
    ] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the operator until interrupted (SIGTERM or Ctrl-C)."""
    if ctx.invoked_subcommand is not None:
        return
    import logging
    import signal
    import threading

    from fleetshare.operator.controller import Operator, Settings
    from fleetshare.operator.kube import Kube, load_client

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if cloud not in ("none", "simulated"):
        raise typer.BadParameter(f"{cloud!r}: give 'none' or 'simulated'", param_hint="--cloud")
    if not registration_timeout > 0:
        raise typer.BadParameter("must be positive", param_hint="--registration-timeout")
    if not stale_seconds > 0:
        raise typer.BadParameter("must be positive", param_hint="--stale-seconds")
    provider = None
    if cloud == "simulated":
        from fleetshare.autoscaling.simulated_cloud import SimulatedCloud

        provider = SimulatedCloud()
    kube = Kube(load_client(kubeconfig))
    settings = Settings(
        namespaces=tuple(namespace or ()),
        install_crds=install_crds,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        cloud=provider,
        registration_timeout_seconds=registration_timeout,
        scaled_objects=scaled_objects,
        stale_seconds=stale_seconds,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    webhook = None
    if webhook_port is not None:
        from fleetshare.operator.webhook import Webhook

        if webhook_cert_dir is not None:
            webhook = Webhook(kube, host="0.0.0.0", port=webhook_port,
                              cert_dir=webhook_cert_dir)  # fmt: skip
            webhook.start()
        else:
            webhook = Webhook(kube, port=webhook_port)
            webhook.start()
            webhook.register()
    operator = Operator(kube, settings)
    health = None
    if metrics_port is not None:
        from fleetshare.operator.health import HealthServer

        health = HealthServer(
            operator.metrics.registry, operator.stalled, operator.serving, metrics_port
        ).start()
    try:
        operator.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        if webhook is not None:
            webhook.stop(unregister=webhook_cert_dir is None)
        if health is not None:
            health.stop()


@operator_app.command("crds")
def operator_crds() -> None:
    """Print fleetshare's CustomResourceDefinitions (YAML, for kubectl apply)."""
    from fleetshare.operator.crds import crds

    print(yaml.safe_dump_all(crds(), sort_keys=False), end="")


@operator_app.command("chart-files")
def operator_chart_files(
    chart: Annotated[Path, typer.Option(help="the Helm chart's directory")] = Path(
        "deploy/helm/fleetshare"
    ),
    check: Annotated[
        bool, typer.Option(help="only check the files are current (exit 1 if not)")
    ] = False,
) -> None:
    """Write the Helm chart's generated files: the webhooks and the operator's RBAC rules,
    whose workload kinds come from the kinds registry."""
    from fleetshare.operator.chart import chart_files

    stale = []
    for name, text in chart_files().items():
        path = chart / name
        current = path.read_text() if path.is_file() else None
        if current == text:
            continue
        stale.append(str(path))
        if not check:
            path.write_text(text)
    if check and stale:
        _fail(f"not current (run fleetshare operator chart-files): {', '.join(stale)}")
    print("\n".join(f"{'stale' if check else 'wrote'} {p}" for p in stale) or "up to date")


@operator_app.command("convert")
def operator_convert(
    source: Annotated[Source, typer.Argument(help="format of FILE")],
    path: Annotated[Path, typer.Argument(help="Kueue YAML or HyperPod JSON file")],
    borrow_limit_reading: ReadingOption = DEFAULT_READING_OPTION,
) -> None:
    """Convert Kueue ClusterQueues or HyperPod compute quotas to a ClusterPolicy and Team
    objects (YAML on stdout, for kubectl apply)."""
    from fleetshare.operator.crds import policy_objects
    from fleetshare.policy.hyperpod import import_hyperpod
    from fleetshare.policy.kueue import import_kueue

    try:
        text = read_text(path)
        if source == Source.KUEUE:
            policy = import_kueue(text)
        else:
            policy = import_hyperpod(text, borrow_limit_reading=borrow_limit_reading.literal())
    except (PolicyError, InputError) as exc:
        _fail(str(exc))
    for note in policy.notes:
        print(f"# note: {note}")
    print(yaml.safe_dump_all(policy_objects(policy), sort_keys=False), end="")


if __name__ == "__main__":  # pragma: no cover
    app()
