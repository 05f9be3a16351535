"""``fleetsim sweep``, ``compare`` and ``check``: the planning commands besides ``size``
(:mod:`sim.cli.size`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from sim.config.inputs import shown
from sim.config.errors import ScenarioError
from sim.output.files.output_paths import slug
from sim.cli.search_flags import (add_confidence, add_executor, check_executor,
                                  confidence_from_args)
from sim.cli.size import add_size
from sim.cli.common import (path_arg, tolerance_arg, count_bar, load_from_args,
                            allowed_paths, add_allow_path, inputs_of, slos_from_args,
                            with_pd_options)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.output.files.atomic_write import write_file
    from sim.output.files.output_paths import check_file
    from sim.config.overrides import check_distinct, check_grid, parse_vary
    from sim.output.files.outputs import csv_safe
    from sim.planning.runner import DaskSchedulerError
    from sim.planning.sweep import sweep

    check_executor(args)
    scenario = load_from_args(args)
    varies = [parse_vary(v) for v in args.vary]
    check_grid(varies, fixed=[s.partition("=")[0] for s in args.set or []])
    check_distinct(scenario, varies)
    out = Path(args.out) if args.out else Path("results") / f"{slug(scenario.name)}-sweep.csv"
    inputs = inputs_of(args, scenario)
    out = check_file(out, kind="a `fleetsim sweep` table", is_kind=_is_sweep_table,
                     inputs=inputs)
    if args.report:
        check_file(Path(args.report), kind="a `fleetsim sweep` page", is_kind=_is_sweep_page,
                   inputs=inputs)
        if Path(args.report).resolve() == out.resolve():
            raise ScenarioError("the page would replace the table; name another file",
                                field="--report")
    bar, update = count_bar("sweep") if not args.quiet else (None, None)
    try:
        table = sweep(scenario, varies, executor=args.executor, workers=args.workers,
                      scheduler=args.scheduler, progress=update)
    except DaskSchedulerError as exc:
        raise ScenarioError(str(exc), field="--scheduler") from None
    finally:
        if bar is not None:
            bar.stop()
    write_file(out, csv_safe(table).to_csv(index=False))
    if args.report:
        from sim.output.pages.sweep_report import build_sweep_report
        write_file(Path(args.report), build_sweep_report(table, scenario.name,
                                                                  scenario.slos))
    if not args.quiet:
        with_pd_options(lambda: print(table.to_string(index=False)))
        print(f"{len(table)} points -> {shown(out)}"
              + (f", {shown(args.report)}" if args.report else ""))
    return 0


def _is_sweep_table(path: Path) -> bool:
    """True if ``path`` starts with the header of a `fleetsim sweep` table."""
    import csv

    from sim.output.sweep_table import SWEEP_X, SWEEP_Y
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader([fh.readline(65536)]), [])
    except (OSError, UnicodeDecodeError):
        return False
    return all(c in header for c in (SWEEP_X, *SWEEP_Y))


def _is_sweep_page(path: Path) -> bool:
    """True if ``path`` starts as the page `fleetsim sweep --report` writes."""
    head = "<!doctype html><html><head><meta charset='utf-8'><title>fleetsim sweep: "
    try:
        with open(path, "rb") as fh:
            return fh.read(len(head)) == head.encode()
    except OSError:
        return False


def _cmd_compare(args: argparse.Namespace) -> int:
    from sim.planning.compare import MAX_RUNS, compare, labels_for, load_summaries, render

    if len(args.runs) < 2 or len(args.runs) > MAX_RUNS:
        raise ScenarioError(f"give 2 to {MAX_RUNS} runs (result folders or scenarios), "
                            f"not {len(args.runs)}", field="compare")
    if args.set and all(Path(run).is_dir() for run in args.runs):
        raise ScenarioError("--set changes the scenarios compare runs now, and every RUN "
                            "here is a result folder, run already: give a scenario, or "
                            "run it again with `fleetsim run SCENARIO --set ...`",
                            field="--set")
    allowed = allowed_paths(args)
    labels = labels_for(args.runs)
    table = compare(dict(zip(labels, load_summaries(
        args.runs, allowed, load=lambda path: load_from_args(args, path)))))
    if args.json:
        records = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                   for r in table.to_dict(orient="records")]
        print(json.dumps({"runs": dict(zip(labels, args.runs)), "figures": records},
                         indent=2))
    else:
        print(render(table))
    return 0


DEFAULT_TOLERANCE = 0.05


def _cmd_drift_check(args: argparse.Namespace) -> int:
    from sim.output.files.atomic_write import write_file
    from sim.output.files.junit import is_junit_report, junit_xml
    from sim.output.files.output_paths import check_file
    from sim.planning.check import broken_fleets, check, is_baseline

    baseline = Path(args.baseline)
    if args.update and args.tolerance is not None:
        raise ScenarioError("--tolerance is how far a figure may drift from the baseline, "
                            "and --update writes the baseline without comparing: give one",
                            field="--tolerance")
    if args.tolerance is None:
        args.tolerance = DEFAULT_TOLERANCE
    if args.update and (args.junit or args.json):
        raise ScenarioError("--update records the baseline and compares nothing: there is "
                            "no verdict to write", field="--junit" if args.junit else "--json")
    if args.update:     # before any work: never an input, never a file check did not write
        check_file(baseline, kind="a `fleetsim check` baseline", is_kind=is_baseline,
                   inputs=inputs_of(args))
    if args.junit:
        check_file(Path(args.junit), kind="a JUnit report `fleetsim check` wrote",
                   is_kind=is_junit_report, inputs=inputs_of(args))
        if Path(args.junit).resolve() == baseline.resolve():
            raise ScenarioError("the report would replace the baseline; name another file",
                                field="--junit")
    code, lines, verdicts = check(args.scenarios, baseline, slos_from_args(args),
                                  args.tolerance, args.update,
                                  allow_paths=allowed_paths(args),
                                  confidence=confidence_from_args(args),
                                  load=lambda path: load_from_args(args, path),
                                  sets=args.set or [])
    if args.update:
        _warn_broken(broken_fleets(verdicts))
    if args.junit:
        write_file(Path(args.junit), junit_xml(((v.scenario, v.problems) for v in verdicts),
                                               str(baseline)))
    if args.json:
        print(json.dumps({"ok": code == 0, "baseline": str(baseline),
                          "scenarios": [{"scenario": v.scenario, "ok": not v.problems,
                                         "problems": v.problems, "measured": v.measured,
                                         "baseline": v.baseline} for v in verdicts]},
                         indent=2))
    else:
        for line in lines:
            print(shown(line))
    return code


def _warn_broken(lines: list[str]) -> None:
    """check --update: say on stderr which recorded fleets break their SLOs (the baseline
    is written all the same, and the exit code stays 0: a later check fails on them)."""
    import sys
    if not lines:
        return
    print("fleetsim check: warning: the baseline records fleets that break their SLOs "
          "(written all the same; a check against it fails until they meet them):",
          file=sys.stderr)
    for line in lines:
        print(f"  {shown(line)}", file=sys.stderr)


def add_planning(sub) -> None:
    add_size(sub)

    sweep_p = sub.add_parser("sweep", help="run a grid over scenario fields")
    sweep_p.add_argument("scenario")
    sweep_p.add_argument("--vary", action="append", required=True, metavar="PATH=VALUES",
                         help="e.g. pools.main.replicas=2..8:2 or workload.rate_scale=1,2,4")
    sweep_p.add_argument("--set", action="append", metavar="PATH=VALUE")
    add_executor(sweep_p, "processes (or Dask workers) for the grid's points")
    sweep_p.add_argument("--out", type=path_arg, help="CSV file for the table (default: results/<scenario "
                                       "name>-sweep.csv); replaces only an earlier sweep table")
    sweep_p.add_argument("--report", type=path_arg, metavar="HTML",
                         help="also write a self-contained page with the sweep's latency "
                              "curves")
    sweep_p.add_argument("--quiet", action="store_true")
    add_allow_path(sweep_p)
    sweep_p.set_defaults(func=_cmd_sweep)

    cmp_p = sub.add_parser(
        "compare", help="result folders or scenarios side by side",
        description="Key figures of two or more runs side by side, with each later run's "
                    "change from the first in percent. Example: fleetsim compare "
                    "results/base results/bigger-pool")
    cmp_p.add_argument("runs", nargs="+", metavar="RUN",
                       help="a result folder (its summary.json) or a scenario (run now)")
    cmp_p.add_argument("--json", action="store_true", help="print the table as JSON")
    cmp_p.add_argument("--set", action="append", metavar="PATH=VALUE",
                       help="override a field of each scenario run now, as run --set does "
                            "(result folders are compared as they were run)")
    add_allow_path(cmp_p)
    cmp_p.set_defaults(func=_cmd_compare)

    check_p = sub.add_parser("check", help="fail when sizing or latency drift from a baseline")
    check_p.add_argument("scenarios", nargs="+")
    check_p.add_argument("--baseline", type=path_arg, required=True)
    check_p.add_argument("--slo", action="append", metavar="METRIC=VALUE")
    check_p.add_argument("--set", action="append", metavar="PATH=VALUE",
                         help="override a field of every scenario checked, as run --set "
                              "does (with --update, the figures recorded are the "
                              "overridden scenario's)")
    check_p.add_argument("--tolerance", type=tolerance_arg, default=None,
                         help=f"how far a figure may drift (default "
                              f"{100 * DEFAULT_TOLERANCE:.0f}%%)")
    check_p.add_argument("--update", action="store_true",
                         help="record these scenarios' figures in the baseline (other "
                              "scenarios' entries are kept; delete the file to start anew)")
    check_p.add_argument("--junit", type=path_arg, metavar="XML",
                         help="also write the verdicts as JUnit XML (one case per scenario)")
    check_p.add_argument("--json", action="store_true",
                         help="print the verdicts as JSON instead of lines")
    add_confidence(check_p)
    add_allow_path(check_p)
    check_p.set_defaults(func=_cmd_drift_check)
