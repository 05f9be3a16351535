"""The ``fleetsim`` command line.

Exit codes: 0 success, 2 bad input (scenario, flags, output folder), 1 an
internal error. Bad input is reported as ``error: file:line: field: message``
without a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sim import units
from sim.errors import ScenarioError, format_cli_error


def _duration(text: str) -> float:
    try:
        value = units.seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


class _Progress:
    """A progress bar on stderr, shown only once a run has taken a few seconds."""

    def __init__(self, after_s: float = 2.0) -> None:
        self._t0 = time.perf_counter()
        self._after_s = after_s
        self._bar = None
        self._task = None

    def __call__(self, now_s: float, limit_s: float) -> None:
        if self._bar is None:
            if time.perf_counter() - self._t0 < self._after_s:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self._bar = Progress(TextColumn("simulating"), BarColumn(),
                                 TextColumn("{task.completed:,.0f} / {task.total:,.0f} s"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)
            self._bar.start()
            self._task = self._bar.add_task("run", total=limit_s)
        self._bar.update(self._task, completed=min(now_s, limit_s))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _cmd_run(args: argparse.Namespace) -> int:
    import sim
    from sim.outputs import write_outputs
    from sim.table import print_summary

    scenario = sim.load_scenario(args.scenario)
    scenario = sim.with_overrides(scenario, seed=args.seed, duration_s=args.duration)
    out_dir = Path(args.out) if args.out else Path("results") / scenario.name
    if out_dir.exists() and any(out_dir.iterdir()) and not args.force:
        raise ScenarioError(f"output folder {out_dir} exists; pass --force to replace it",
                            file=str(out_dir))
    progress = _Progress() if not args.quiet else None
    try:
        results = sim.run(scenario, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    written = write_outputs(results, out_dir, force=args.force)
    if args.json:
        print(json.dumps(results.summary, indent=2))
    elif not args.quiet:
        print_summary(results.summary)
        print(f"wrote {len(written)} files to {out_dir}/ "
              f"(simulated {results.summary['end_s']:,.0f} s in {results.wall_s:.1f} s)")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from sim.config.scenario import Scenario
    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import sim
    for path in args.scenarios:
        sim.load_scenario(path)
        print(f"{path}: ok")
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from sim import profiles
    print("hardware: " + ", ".join(profiles.hardware_names()))
    print("models:   " + ", ".join(profiles.model_names()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetsim", description="Discrete-event capacity planner for LLM serving fleets.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="simulate a scenario and write its results")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--out", help="output folder (default: results/<scenario name>)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--duration", type=_duration,
                     help="override the arrival window, e.g. 600 or 10min")
    run.add_argument("--force", action="store_true", help="replace an existing output folder")
    run.add_argument("--quiet", action="store_true", help="print nothing but errors")
    run.add_argument("--json", action="store_true", help="print summary.json instead of tables")
    run.set_defaults(func=_cmd_run)

    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    schema.set_defaults(func=_cmd_schema)

    check = sub.add_parser("lint", help="validate scenario files without running them")
    check.add_argument("scenarios", nargs="+")
    check.set_defaults(func=_cmd_check)

    prof = sub.add_parser("profiles", help="list the shipped hardware and model profiles")
    prof.set_defaults(func=_cmd_profiles)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as exc:
        print(format_cli_error(exc), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
