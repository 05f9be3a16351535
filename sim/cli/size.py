"""``fleetsim size``: the cheapest fleet meeting the SLOs. The command checks every flag
before any work, then runs the search of its mode, a function each: each pool's options
(:func:`_size_options`, at the busiest window with --peak), a pair of coupled pools
(--joint), the autoscalers (--autoscaled) or the highest load (--max-rate)."""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

from sim.config.inputs import shown
from sim.config.errors import ScenarioError
from sim.cli.common import (duration_arg, path_arg, count_arg, load_from_args,
                            add_allow_path, inputs_of, scenario_slos, slos_from_args,
                            with_pd_options)
from sim.cli.search_flags import (add_confidence, add_executor, check_executor,
                                  confidence_from_args)


def cmd_size(args: argparse.Namespace) -> int:
    """``fleetsim size``: every flag checked before any work, then the search of the mode
    given (--joint, --autoscaled, --max-rate, or each pool's options), at the --peak or
    over the --window where one is given."""
    from sim.output.output_paths import prepare_folder

    _refuse_outputs(args)
    scenario = load_from_args(args)
    slos = slos_from_args(args) or scenario_slos(scenario)
    if not slos:
        raise ScenarioError("give at least one --slo, e.g. --slo ttft_p99=2s, or an `slos:` "
                            "block in the scenario (its fleet-wide objectives: size sizes "
                            "each pool for all the requests it serves)", field="--slo")
    pools = _named_pools(args, scenario)
    inputs = inputs_of(args, scenario)
    out = prepare_folder(args.out, force=args.force, inputs=inputs) if args.out else None
    if args.write_scenario and args.max_rate:
        raise ScenarioError("--write-scenario writes the fleet size chose, and --max-rate "
                            "chooses none: leave one out", field="--write-scenario")
    written = _check_written(args, inputs, out) if args.write_scenario else None
    whole = scenario            # the run as given: what --write-scenario writes
    if args.max_rate and all(getattr(s.arrival, "type", None) == "closed"
                             for s in scenario.workload.streams.values()):
        raise ScenarioError("--max-rate scales the streams' rates, and every stream here is "
                            "closed-loop (its load is its concurrency): sweep "
                            "workload.streams.NAME.arrival.concurrency instead",
                            field="--max-rate")
    confidence = confidence_from_args(args)
    if args.thresholds and not args.joint:
        raise ScenarioError("--thresholds tries a prompt-length split's thresholds in a "
                            "joint search: give --joint SHORT_POOL,LONG_POOL as well",
                            field="--thresholds")
    if args.joint and args.autoscaled:
        raise ScenarioError("--joint sizes two fixed pools and --autoscaled one pool's "
                            "autoscaler: give one", field="--autoscaled")
    peak = None
    if args.peak is not None:
        scenario, peak = _at_peak(args, scenario, pools)
    if args.window is not None:
        scenario = _in_window(args, scenario, slos, pools)
    if args.joint:
        return _size_joint(args, scenario, slos, confidence, out, inputs, whole, written)
    if args.autoscaled:
        return _size_autoscaled(args, scenario, slos, confidence, out, inputs, whole,
                                written)
    if args.max_rate:
        return _size_max_rate(args, scenario, slos, pools, confidence, out, inputs)
    return _size_options(args, scenario, slos, pools, confidence, out, inputs, whole,
                         written, peak)


def _refuse_outputs(args: argparse.Namespace) -> None:
    """--force and --report where size writes nothing for them (exit 2)."""
    if args.force and not args.out and not args.write_scenario:
        raise ScenarioError("--force replaces an output folder or a scenario size wrote, "
                            "and size writes none without --out or --write-scenario",
                            field="--force")
    if args.report and not args.out:
        raise ScenarioError("--report writes report.html beside size.csv: give --out DIR",
                            field="--report")
    if args.report and args.max_rate:
        raise ScenarioError("--report shows the options size compares; --max-rate "
                            "searches one fleet's load: give one", field="--report")


def _named_pools(args: argparse.Namespace, scenario) -> list[str] | None:
    """The pools --pool names (each once, each the scenario's), or None: every pool."""
    pools = args.pool or None
    twice = sorted({p for p in pools or [] if pools.count(p) > 1})
    if twice:
        raise ScenarioError(f"--pool {twice[0]}: given twice; name each pool once",
                            field="--pool")
    for p in pools or []:
        if p not in scenario.pools:
            raise ScenarioError(f"--pool: unknown pool '{p}'; pools: {', '.join(scenario.pools)}",
                                field="--pool")
    return pools


def _at_peak(args: argparse.Namespace, scenario, pools: list[str] | None):
    """--peak: the scenario cut to its busiest window, and what was found (see
    :func:`sim.planning.peak.peak_windowed`); refused beside another search mode."""
    from sim.planning.peak import peak_windowed
    for flag, given in (("--window", args.window is not None),
                        ("--autoscaled", args.autoscaled), ("--joint", args.joint),
                        ("--max-rate", args.max_rate)):
        if given:
            raise ScenarioError(f"--peak sizes fixed pools at the busiest window, then "
                                f"confirms them over the whole run; leave out {flag}",
                                field="--peak")
    return peak_windowed(scenario, args.peak, frozenset(pools or list(scenario.pools)))


def _in_window(args: argparse.Namespace, scenario, slos, pools: list[str] | None):
    """--window: the scenario whose trials simulate the window's arrivals after the
    warm-up (``auto``: as long as the SLOs need, said unless --quiet)."""
    from sim.planning.window import auto_windowed, windowed
    if args.autoscaled:
        raise ScenarioError("--autoscaled sizes an autoscaler over the whole run's "
                            "changing load; leave out --window", field="--window")
    sized = frozenset([p.strip() for p in args.joint.split(",")] if args.joint else
                      (pools or list(scenario.pools)))
    if args.window != "auto":
        return windowed(scenario, args.window, sized)
    scenario, window_s = auto_windowed(scenario, slos, sized)
    if not args.quiet:
        print(f"--window auto: each trial simulates {window_s:g} s of arrivals "
              f"after the {scenario.warmup:g} s warm-up" if window_s is not None
              else "--window auto: the SLOs need the whole run; each trial "
              "simulates all of it")
    return scenario


def _size_max_rate(args: argparse.Namespace, scenario, slos, pools: list[str] | None,
                   confidence, out: Path | None, inputs) -> int:
    """size --max-rate: the highest load each pool (as configured) sustains, a JSON line
    a pool (and max-rate.json in --out)."""
    from sim.output.outputs import write_folder
    from sim.planning.size import max_rate

    for flag in ("workers", "executor", "scheduler"):
        if getattr(args, flag) not in (1, "local", None):
            raise ScenarioError(f"--{flag} runs size's options side by side, and "
                                "--max-rate searches one load at a time: leave it out",
                                field=f"--{flag}")
    rates = [{"pool": pool, **max_rate(scenario, slos, pool, confidence=confidence)}
             for pool in pools or list(scenario.pools)]
    if out is not None:
        def write_rates(folder: Path) -> list[Path]:
            path = folder / "max-rate.json"
            path.write_text(json.dumps(rates, indent=2) + "\n", encoding="utf-8")
            return [path]

        write_folder(write_rates, out, force=args.force, inputs=inputs,
                     command="size --max-rate")
    for row in rates:
        print(json.dumps(row))
    return _verdict([r["pool"] for r in rates if not r["feasible"]], "no load")


def _size_options(args: argparse.Namespace, scenario, slos, pools: list[str] | None,
                  confidence, out: Path | None, inputs, whole, written: Path | None,
                  peak: dict | None) -> int:
    """size: each pool's options searched for the cheapest meeting the SLOs (at the
    ``peak`` window, then confirmed over ``whole``, where --peak is given); the table,
    the files of --out and --report, and the fleet chosen to ``written``."""
    from sim.planning.runner import DaskSchedulerError
    from sim.planning.size import size

    check_executor(args)
    try:
        with _trial_line(args, "size") as line:
            table = size(scenario, slos, pools, line, confidence=confidence,
                         executor=args.executor, workers=args.workers,
                         scheduler=args.scheduler)
    except DaskSchedulerError as exc:
        raise ScenarioError(str(exc), field="--scheduler") from None
    page = None
    if args.report:
        from sim.output.size_report import build_size_report
        from sim.planning.chosen import chosen_fleet
        page = build_size_report(table, scenario.name, slos, chosen_fleet(scenario, table))
    missed = _confirm_peak(whole, table, slos, confidence, peak) if peak else []
    more = {"report.html": page} if page is not None else {}
    if peak is not None:
        more["peak.json"] = json.dumps(peak, indent=2) + "\n"
    in_out, write_scenario = _fleet_scenario(lambda: _chosen_fleet(whole, table), written, out,
                                             slos)
    if out is not None:
        _write_sized(table, out, args, inputs, "size", {**more, **in_out})
    with_pd_options(lambda: print(table.to_string(index=False)))
    if peak is not None:
        _print_peak(peak)
    write_scenario()
    feasible = set(table.loc[table["feasible"], "pool"]) if len(table) else set()
    code = _verdict([p for p in dict.fromkeys(table["pool"]) if p not in feasible]
                    if len(table) else [], "no option")
    if missed and not code:
        import sys
        print(f"fleetsim size: the fleet sized at the peak misses the SLOs over the whole "
              f"run for pool(s) {', '.join(missed)}", file=sys.stderr)
        return 1
    return code


def _confirm_peak(whole, table, slos, confidence, peak: dict) -> list[str]:
    """--peak: the chosen fleet run over the whole run (``peak`` gets its rows under
    ``confirmed``); the pools whose SLOs it misses there."""
    from sim.planning.peak import confirm
    from sim.planning.chosen import chosen_rows, sized_fleet

    fleet = sized_fleet(whole, table)
    rows = [] if fleet is None else confirm(fleet, list(chosen_rows(table)), slos,
                                            confidence)
    peak["confirmed"] = rows
    return [r["pool"] for r in rows if not r["met"]]


def _print_peak(peak: dict) -> None:
    """The window --peak sized at, and its confirmation, a line a pool."""
    print(f"--peak: the busiest window is [{peak['window_start_s']:,.0f} s, "
          f"{peak['window_end_s']:,.0f} s), {peak['window_arrivals']:,.0f} arrivals of the "
          f"run's {peak['run_arrivals']:,.0f}; each trial simulated it (after a "
          f"{peak['lead_s']:,.0f} s lead) and judged the SLOs over its arrivals")
    if peak["streams_left_out"]:
        print(f"--peak: stream(s) {', '.join(peak['streams_left_out'])} ended before the "
              f"lead: left out of the trials, run in the confirmation")
    if not peak["confirmed"]:
        print("--peak: no pool has an option meeting the SLOs at the peak; nothing to "
              "confirm over the whole run")
    for row in peak["confirmed"]:
        figures = ", ".join(f"{k} {v:.4g}" for k, v in row.items()
                            if k not in ("pool", "met") and not k.startswith("margin_"))
        print(f"--peak: confirmed over the whole run: pool {row['pool']} "
              + ("meets the SLOs" if row["met"] else "MISSES the SLOs") + f" ({figures})")


def _trial_line(args: argparse.Namespace, label: str):
    """The progress line of a search (see :mod:`sim.cli.trial_progress`), to hold with
    ``with`` around the search (it gives None with --quiet)."""
    from contextlib import nullcontext

    from sim.cli.trial_progress import TrialLine
    return nullcontext() if args.quiet else TrialLine(label)


SCENARIO_SUFFIXES = (".yaml", ".yml")


def _check_written(args: argparse.Namespace, inputs, out: Path | None) -> Path:
    """Before any work: the file --write-scenario names may be written (absent, or with
    --force a scenario an earlier --write-scenario wrote; never an input), a YAML file
    by its name. Its missing folders are made, as --out's are; inside --out's folder it
    is one of that folder's outputs (see :func:`_fleet_scenario`)."""
    import os

    from sim.output.output_paths import check_file, output_error
    from sim.planning.write_back import is_written_scenario

    if Path(args.write_scenario).suffix.lower() not in SCENARIO_SUFFIXES:
        raise ScenarioError(f"--write-scenario {shown(args.write_scenario)}: a scenario is "
                            f"written as YAML: give a file name ending in .yaml or .yml",
                            field="--write-scenario")
    if out is not None and _inside(out, Path(args.write_scenario)) == ".":
        raise ScenarioError("--write-scenario names the --out folder itself: give a file "
                            "in it or elsewhere", field="--write-scenario")
    path = check_file(Path(args.write_scenario), inputs=inputs,
                      kind="a scenario `fleetsim size --write-scenario` wrote",
                      is_kind=is_written_scenario)
    if os.path.lexists(path) and not args.force:
        raise output_error("the file exists; add --force to replace a scenario an earlier "
                           "--write-scenario wrote, or name another file", path)
    return path


def _chosen_fleet(scenario, table):
    """The fleet ``table`` (size's) chose in ``scenario``, and a line a pool saying what."""
    from sim.planning.chosen import chosen_line, chosen_rows, sized_fleet
    return sized_fleet(scenario, table), [chosen_line(pool, row) for pool, row
                                          in chosen_rows(table).items()]


def _inside(folder: Path, path: Path) -> str | None:
    """``path`` relative to ``folder`` ('/'-separated; '.' for the folder itself), or None
    where it lies outside it."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(folder)).as_posix()
    except ValueError:
        return None


def _fleet_scenario(chosen: Callable[[], tuple], path: Path | None, out: Path | None,
                    slos) -> tuple[dict[str, str], Callable[[], None]]:
    """--write-scenario: the fleet ``chosen()`` gives (see :mod:`sim.planning.write_back`;
    with lines saying what was chosen) as a scenario at ``path``. Returns the files to add to
    --out's folder (``path`` where it lies inside ``out``: the folder's marker lists it,
    so --force may replace the folder again) and what, called after the table is
    printed, writes it elsewhere and says where, and which folders its data files need
    allowed; no fleet (no answer) writes nothing and says so."""
    import sys

    from sim.output.atomic_write import write_file
    from sim.output.table import slo_value_text
    from sim.planning.write_back import scenario_text

    if path is None:
        return {}, lambda: None
    fleet, lines = chosen()
    if fleet is None:
        return {}, lambda: print(f"--write-scenario: nothing meets the SLOs; {shown(path)} "
                                 "not written", file=sys.stderr)
    lines = [*lines, "sized for " + ", ".join(f"{s.metric} {slo_value_text(s.metric, s.target)}"
                                             for s in slos) + f", seed {fleet.seed}"]
    text, outside = scenario_text(fleet, path, lines)
    in_out = _inside(out, path) if out is not None else None

    def write() -> None:
        if in_out is None:
            write_file(path, text)
        print(f"wrote {shown(path)}: " + "; ".join(lines[:-1]))
        if outside:
            print("  its data files lie outside its folder: run it with "
                  + " ".join(f"--allow-path {shown(p)}" for p in outside))

    return ({in_out: text} if in_out is not None else {}), write


MAX_THRESHOLDS = 16


def _thresholds_arg(text: str) -> list[int]:
    """--thresholds: prompt-token thresholds, comma-separated whole numbers from 1."""
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= MAX_THRESHOLDS:
        raise argparse.ArgumentTypeError(f"give 1 to {MAX_THRESHOLDS} thresholds, got "
                                         f"{len(parts)}")
    return [count_arg(10_000_000)(p) for p in parts]


def _window_arg(text: str) -> float | str:
    """--window: a duration, or ``auto``."""
    if text == "auto":
        return text
    try:
        return duration_arg(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (a duration such as 90s, or auto)") from None


def _write_sized(table, out: Path, args: argparse.Namespace, inputs, command: str,
                 more: dict[str, str] | None = None) -> None:
    """size.csv and size.json of ``table`` in ``out`` (with ``more`` files: name to text),
    written as one folder fleetsim owns."""
    from sim.output.outputs import csv_safe, write_folder

    def write(folder: Path) -> list[Path]:
        csv_safe(table).to_csv(folder / "size.csv", index=False)
        table.to_json(folder / "size.json", orient="records", indent=2)
        written = [folder / "size.csv", folder / "size.json"]
        for name, text in (more or {}).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            written.append(folder / name)
        return written

    write_folder(write, out, force=args.force, inputs=inputs, command=command)


# size's flags a search mode may refuse, and whether each was given
_GIVEN = {"--max-rate": lambda a: a.max_rate, "--pool": lambda a: a.pool,
          "--report": lambda a: a.report,
          "--write-scenario": lambda a: a.write_scenario,
          "--workers": lambda a: a.workers != 1 or a.executor != "local"}


def _refuse_beside(args: argparse.Namespace, mode: str, flags: tuple[str, ...]) -> None:
    """Refuse the first of ``flags`` given beside the search ``mode`` (exit 2)."""
    for flag in flags:
        if _GIVEN[flag](args):
            raise ScenarioError(f"{flag} does not go with {mode}", field=flag)


def _size_joint(args: argparse.Namespace, scenario, slos, confidence, out, inputs, whole,
                written: Path | None) -> int:
    """size --joint A,B: two coupled pools sized together (``whole``: the run as given,
    written with the pair chosen to ``written``)."""
    from sim.planning.joint import joint_fleet, joint_size

    _refuse_beside(args, "--joint, which searches one pair of pools step by step",
                   ("--max-rate", "--pool", "--report", "--workers"))
    from sim.planning.progress import TrialCounter

    pools = [p.strip() for p in args.joint.split(",")]
    with _trial_line(args, "size --joint") as line:
        table = joint_size(scenario, pools, slos, confidence=confidence,
                           counter=TrialCounter(line), thresholds=args.thresholds)
    in_out, write_scenario = _fleet_scenario(lambda: joint_fleet(whole, pools, table), written,
                                             out, slos)
    if out is not None:
        _write_sized(table, out, args, inputs, "size --joint", in_out)
    with_pd_options(lambda: print(table.to_string(index=False)))
    write_scenario()
    return _verdict([] if table["chosen"].any() else [" and ".join(pools)], "no pair")


def _size_autoscaled(args: argparse.Namespace, scenario, slos, confidence, out,
                     inputs, whole, written: Path | None) -> int:
    """size --autoscaled: each pool's target-tracking autoscaler sized for the whole run
    (written with the autoscalers chosen to ``written``)."""
    from sim.planning.autoscaled import (autoscaled_fleet, autoscaled_size,
                                         autoscaled_trials, search_plan)

    _refuse_beside(args, "--autoscaled", ("--max-rate", "--report"))
    from sim.planning.runner import DaskSchedulerError
    check_executor(args)
    pools = args.pool or [p for p in scenario.pools
                          if (scaler := scenario.pools[p].autoscaler) is not None
                          and scaler.sized_by_target]
    if not pools:
        raise ScenarioError("no pool has a target-tracking autoscaler to size (autoscaler: "
                            "{type: target, ...})", field="--autoscaled")
    from sim.planning.progress import TrialCounter

    most = []                       # every pool's search refused before any pool's run
    for pool in pools:
        tried, low, cap = search_plan(scenario, pool, confidence)
        most.append(autoscaled_trials(len(tried), low, cap))
    tables, teams = [], {}
    with _trial_line(args, "size --autoscaled") as line:
        counter = TrialCounter(line)
        for i, pool in enumerate(pools):
            counter.most_after = sum(most[i + 1:])

            def ended(done: int, total: int, pool=pool) -> None:
                if line is not None and done < total:
                    line(f"pool {pool}: {done} of {total} targets searched side by side",
                         done, total - done, "target")
            try:
                table, per_team = autoscaled_size(
                    scenario, pool, slos, confidence=confidence, counter=counter,
                    executor=args.executor, workers=args.workers, scheduler=args.scheduler,
                    ended=ended)
            except DaskSchedulerError as exc:
                raise ScenarioError(str(exc), field="--scheduler") from None
            tables.append(table)
            teams[pool] = per_team
    import pandas as pd
    table = pd.concat(tables, ignore_index=True)
    in_out, write_scenario = _fleet_scenario(lambda: autoscaled_fleet(whole, table), written, out,
                                             slos)
    if out is not None:
        _write_sized(table, out, args, inputs, "size --autoscaled", {"teams.json": json.dumps(
            {"cost_usd_per_day_by_team": teams}, indent=2) + "\n", **in_out})
    with_pd_options(lambda: print(table.to_string(index=False)))
    write_scenario()
    for pool, per_team in teams.items():
        if per_team:
            print(f"pool {pool}, chosen autoscaler: cost per day by team: " + ", ".join(
                f"{shown(team)} ${usd:,.2f}" for team, usd in per_team.items()))
    return _verdict([p for p, t in teams.items() if t is None], "no target")


def _verdict(failed: list[str], what: str) -> int:
    """Exit 1, with a line on stderr, when some pool has no answer within the SLOs."""
    if not failed:
        return 0
    import sys
    print(f"fleetsim size: {what} meets the SLOs for pool(s) {', '.join(failed)}",
          file=sys.stderr)
    return 1


def add_size(sub) -> None:
    """The ``size`` command's parser."""
    size_p = sub.add_parser("size", help="cheapest fleet meeting SLOs, per pool")
    size_p.add_argument("scenario")
    size_p.add_argument("--slo", action="append", metavar="METRIC=VALUE",
                        help="e.g. ttft_p99=2s, tpot_p99=50ms, attainment=0.99")
    size_p.add_argument("--pool", action="append", help="only these pools")
    size_p.add_argument("--max-rate", action="store_true",
                        help="instead: the highest load the fleet as configured sustains")
    size_p.add_argument("--set", action="append", metavar="PATH=VALUE")
    size_p.add_argument("--out", type=path_arg, help="folder for size.csv and size.json")
    size_p.add_argument("--force", action="store_true",
                        help="replace an output folder an earlier fleetsim run wrote")
    size_p.add_argument("--quiet", action="store_true",
                        help="no progress line (on a terminal: the trial running, the "
                             "time elapsed and an estimate of what is left)")
    size_p.add_argument("--joint", metavar="POOL_A,POOL_B",
                        help="size two coupled pools together (a disaggregated model's "
                             "prefill and decode pools, a cascade's, a prompt-length "
                             "split's): the cheapest pair of counts meeting the SLOs over "
                             "every request through either")
    size_p.add_argument("--thresholds", type=_thresholds_arg, metavar="TOKENS,...",
                        help="with --joint over a prompt-length split's pools: try each of "
                             "these thresholds (prompt tokens, e.g. 1024,2048,4096) in place "
                             "of the configured one and answer with the cheapest pair of "
                             "counts under any")
    size_p.add_argument("--autoscaled", action="store_true",
                        help="size each target-tracking autoscaler (or those of --pool) for "
                             "the whole run: the target, the lowest min_replicas and the "
                             "fewest max_replicas keeping the SLOs at the lowest cost, with "
                             "cost per day and per team")
    size_p.add_argument("--window", type=_window_arg, metavar="DURATION|auto",
                        help="each trial simulates this much of the arrivals after the "
                             "warm-up, not the whole run (a stationary load only: constant "
                             "rates, no traces, sessions or other autoscaled pools); auto: "
                             "as long as the SLOs' percentiles need (200 requests of the "
                             "slowest stream past the strictest one), at least a minute")
    size_p.add_argument("--write-scenario", type=path_arg, metavar="FILE",
                        help="write the chosen fleet as a scenario (each sized pool's "
                             "replicas, hardware, TP, PP, weight and KV precisions as its "
                             "trials ran them; all else kept) that `fleetsim run FILE` "
                             "reproduces (a .yaml or .yml name; missing folders are made, "
                             "as --out's are; inside --out's folder it is one of its "
                             "outputs); an existing file is replaced only with --force, "
                             "and only if --write-scenario wrote it")
    size_p.add_argument("--peak", type=duration_arg, metavar="DURATION",
                        help="for a load that changes over the run (a diurnal rate, a "
                             "trace): size at its busiest window of this length (the most "
                             "arrivals, from the rate functions and trace timestamps), then "
                             "run the chosen fleet over the whole run and report both "
                             "(exit 1 where it misses the SLOs there)")
    size_p.add_argument("--report", action="store_true",
                        help="also write report.html in --out: the options' Pareto views, "
                             "the cost model of each, and the chosen fleet's cost per pool "
                             "and per team (one more run)")
    add_confidence(size_p)
    add_executor(size_p, "processes (or Dask workers) searching the options side by side")
    add_allow_path(size_p)
    size_p.set_defaults(func=cmd_size)
