"""``fleetsim size``: the cheapest fleet meeting the SLOs. The command checks every flag
before any work, then runs the search of its mode, a function each in
:mod:`sim.cli.size_modes`: each pool's options (at the busiest window with --peak), a
pair of coupled pools (--joint), the autoscalers (--autoscaled) or the highest load
(--max-rate); what it writes is :mod:`sim.cli.size_written`'s."""
from __future__ import annotations

import argparse

from sim.config.errors import ScenarioError
from sim.cli.common import (duration_arg, path_arg, count_arg, load_from_args, add_allow_path,
                            inputs_of, scenario_slos, slos_from_args)
from sim.cli.search_flags import add_confidence, add_executor, confidence_from_args
from sim.cli.size_modes import size_autoscaled, size_joint, size_max_rate, size_options
from sim.cli.size_written import check_written


def cmd_size(args: argparse.Namespace) -> int:
    """``fleetsim size``: every flag checked before any work, then the search of the mode
    given (--joint, --autoscaled, --max-rate, or each pool's options), at the --peak or
    over the --window where one is given."""
    from sim.output.files.output_paths import prepare_folder

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
    written = check_written(args, inputs, out) if args.write_scenario else None
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
        return size_joint(args, scenario, slos, confidence, out, inputs, whole, written)
    if args.autoscaled:
        return size_autoscaled(args, scenario, slos, confidence, out, inputs, whole,
                               written)
    if args.max_rate:
        return size_max_rate(args, scenario, slos, pools, confidence, out, inputs)
    return size_options(args, scenario, slos, pools, confidence, out, inputs, whole,
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
