"""``fleetsim run``: one run (or replications over seeds) and its output folder."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.config.inputs import shown
from sim.config.errors import ScenarioError
from sim.output.files.output_paths import slug
from sim.cli.common import (duration_arg, path_arg, count_arg, MAX_REPLICATIONS,
                            MAX_WORKERS, Progress, count_bar, load_from_args,
                            add_allow_path, inputs_of, warmup_arg)


def _cmd_replications(args: argparse.Namespace, scenario) -> int:
    from sim.config.overrides import with_values
    from sim.planning.runner import run_many
    from sim.planning.stats import aggregate, slo_met_share

    from sim.output.files.output_paths import prepare_folder
    from sim.output.files.outputs import write_folder

    default = Path("results") / f"{slug(scenario.name)}-replications"
    out_dir = Path(args.out) if args.out else default
    inputs = inputs_of(args, scenario)
    out_dir = prepare_folder(out_dir, force=args.force, inputs=inputs)
    seeds = [scenario.seed + i for i in range(args.replications)]
    scenarios = [with_values(scenario, {"seed": s}) for s in seeds]
    bar, update = count_bar("replications") if not args.quiet else (None, None)
    try:
        summaries = run_many(scenarios, workers=args.workers, progress=update)
    finally:
        if bar is not None:
            bar.stop()
    result = {"scenario": scenario.name, "seeds": seeds, "figures": aggregate(summaries),
              "slo_met_share": slo_met_share(summaries), "replications": summaries}

    def write(folder: Path) -> list[Path]:
        path = folder / "replications.json"
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        return [path]

    write_folder(write, out_dir, force=args.force, inputs=inputs, command="run --replications")
    if args.json:
        print(json.dumps(result["figures"], indent=2))
    elif not args.quiet:
        figs = result["figures"]
        for key in ("latency_s.ttft.p50", "latency_s.ttft.p99", "latency_s.tpot.p50",
                    "latency_s.tpot.p99", "throughput.requests_per_s",
                    "throughput.output_tokens_per_s", "cost.usd_per_million_output_tokens"):
            f = figs.get(key)
            if f and f["mean"] is not None:
                hw = f["half_width"]
                print(f"{key:40s} {f['mean']:12.6g}" + (f" ± {hw:.3g}" if hw is not None else ""))
        for key, share in result["slo_met_share"].items():
            if key.count(".") <= 1:             # the verdicts: overall, fleet, each team
                label = "all SLOs met" if key == "slo" else f"SLOs of {key} met"
                print(f"{label:40s} in {share:.0%} of the replications")
        print(f"{len(seeds)} replications (95% confidence intervals) -> "
              f"{out_dir}/replications.json")
    return 0


def _read_sweep(path: str):
    import pandas as pd

    from sim.config.inputs import InputFileError, open_regular, shown
    from sim.output.sweep_table import check_sweep_table
    try:
        with open_regular(path) as fh:
            table = pd.read_csv(fh, encoding="utf-8")
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=shown(path), field="--sweep") from None
    except (OSError, ValueError):       # pandas' messages may quote the file
        raise ScenarioError("cannot read as a CSV table (a `fleetsim sweep` table)",
                            file=shown(path), field="--sweep") from None
    check_sweep_table(table, path)
    return table


def _cmd_run(args: argparse.Namespace) -> int:
    import sim
    from sim.output.files.outputs import write_outputs
    from sim.output.table import print_summary

    from sim.output.files.output_paths import prepare_folder

    if args.quiet and args.json:
        raise ScenarioError("--quiet prints nothing and --json prints the summary: give one",
                            field="--json")
    if args.replications > 1 and args.sweep:
        raise ScenarioError("--sweep adds a sweep's curves to one run's report; it does not "
                            "go with --replications", field="--sweep")
    if args.no_report and args.sweep:
        raise ScenarioError("--sweep adds a sweep's curves to the report, which --no-report "
                            "leaves out: give one", field="--no-report")
    if args.no_report and args.replications > 1:
        raise ScenarioError("--replications writes replications.json and no report: "
                            "--no-report does not go with it", field="--no-report")
    if args.png and args.replications > 1:
        raise ScenarioError("--replications writes replications.json and no charts: --png "
                            "does not go with it", field="--png")
    if args.no_requests and args.csv:
        raise ScenarioError("--csv copies the request table as CSV, which --no-requests "
                            "leaves out: give one", field="--csv")
    if args.replications > 1 and (args.no_requests or args.csv):
        flag = "--no-requests" if args.no_requests else "--csv"
        raise ScenarioError(f"--replications writes replications.json and no request "
                            f"table: {flag} does not go with it", field=flag)
    if args.workers > 1 and args.replications == 1:
        raise ScenarioError("--workers runs replications side by side: give --replications "
                            "N as well", field="--workers")
    scenario = load_from_args(args)
    if args.replications > 1:
        return _cmd_replications(args, scenario)
    out_dir = Path(args.out) if args.out else Path("results") / slug(scenario.name)
    inputs = inputs_of(args, scenario)
    out_dir = prepare_folder(out_dir, force=args.force, inputs=inputs)
    sweep = _read_sweep(args.sweep) if args.sweep else None
    progress = Progress() if not args.quiet else None
    try:
        results = sim.run(scenario, progress=progress, notice=None if args.quiet else
                          lambda text: print(text, file=sys.stderr, flush=True))
    finally:
        if progress is not None:
            progress.close()
    written = write_outputs(results, out_dir, force=args.force, sweep=sweep, inputs=inputs,
                            report=not args.no_report, requests=not args.no_requests,
                            csv=args.csv, png=args.png)
    if args.json:
        print(json.dumps(results.summary, indent=2))
    elif not args.quiet:
        print_summary(results.summary)
        setup_s = results.extra.get("setup_s", 0.0)
        print(f"wrote {len(written)} files to {shown(out_dir)}/ "
              f"(simulated {results.summary['end_s']:,.0f} s in {results.wall_s:.2f} s: "
              f"{setup_s:.2f} s to set up, {results.wall_s - setup_s:.2f} s of events)")
    return 0


def add_run(sub) -> None:
    run = sub.add_parser("run", help="simulate a scenario and write its results")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--out", type=path_arg, help="output folder (default: results/<scenario name>, made "
                                   "safe as a folder name)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--duration", type=duration_arg,
                     help="override the arrival window, e.g. 600 or 10min")
    run.add_argument("--force", action="store_true",
                     help="replace an output folder an earlier fleetsim run wrote")
    run.add_argument("--quiet", action="store_true", help="print nothing but errors")
    run.add_argument("--json", action="store_true", help="print summary.json instead of tables")
    run.add_argument("--no-report", action="store_true",
                     help="write the data files only, without report.html")
    run.add_argument("--png", action="store_true",
                     help="also draw the report's charts as PNG files under plots/ "
                          "(with matplotlib: a second or more)")
    run.add_argument("--csv", action="store_true",
                     help="write requests.csv (and steps.csv with record_steps) beside "
                          "their Parquet files: the same rows, four times the size")
    run.add_argument("--no-requests", action="store_true",
                     help="write no per-request table (summary.json, timeseries.csv and "
                          "the report stay the same)")
    run.add_argument("--set", action="append", metavar="PATH=VALUE",
                     help="override a scenario field, e.g. pools.main.replicas=4")
    run.add_argument("--warmup", type=warmup_arg, help="leave out requests arriving before this")
    run.add_argument("--replications", type=count_arg(MAX_REPLICATIONS), default=1,
                     help="run N seeds and report means with 95%% confidence intervals")
    run.add_argument("--workers", type=count_arg(MAX_WORKERS), default=1,
                     help="processes for replications (at most one per replication)")
    run.add_argument("--sweep", metavar="CSV", type=path_arg,
                     help="a `fleetsim sweep` table whose latency curves report.html "
                          "shows")
    add_allow_path(run)
    run.set_defaults(func=_cmd_run)
