"""The searches of `fleetsim size`, one function a mode: each pool's options (at the
busiest window with --peak), a pair of coupled pools (--joint), the autoscalers
(--autoscaled) and the highest load (--max-rate); each refuses the flags it cannot take."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from sim.config.inputs import shown
from sim.config.errors import ScenarioError
from sim.cli.common import with_pd_options
from sim.cli.search_flags import check_executor
from sim.cli.size_written import (chosen_fleet_lines, fleet_scenario, trial_line, verdict,
                                  write_sized)


def size_max_rate(args: argparse.Namespace, scenario, slos, pools: list[str] | None,
                  confidence, out: Path | None, inputs) -> int:
    """size --max-rate: the highest load each pool (as configured) sustains, a JSON line
    a pool (and max-rate.json in --out)."""
    from sim.output.files.outputs import write_folder
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
    return verdict([r["pool"] for r in rates if not r["feasible"]], "no load")


def size_options(args: argparse.Namespace, scenario, slos, pools: list[str] | None,
                 confidence, out: Path | None, inputs, whole, written: Path | None,
                 peak: dict | None) -> int:
    """size: each pool's options searched for the cheapest meeting the SLOs (at the
    ``peak`` window, then confirmed over ``whole``, where --peak is given); the table,
    the files of --out and --report, and the fleet chosen to ``written``."""
    from sim.planning.runner import DaskSchedulerError
    from sim.planning.size import size

    check_executor(args)
    try:
        with trial_line(args, "size") as line:
            table = size(scenario, slos, pools, line, confidence=confidence,
                         executor=args.executor, workers=args.workers,
                         scheduler=args.scheduler)
    except DaskSchedulerError as exc:
        raise ScenarioError(str(exc), field="--scheduler") from None
    page = None
    if args.report:
        from sim.output.pages.size_report import build_size_report
        from sim.planning.chosen import chosen_fleet
        page = build_size_report(table, scenario.name, slos, chosen_fleet(scenario, table))
    missed = confirm_peak(whole, table, slos, confidence, peak) if peak else []
    more = {"report.html": page} if page is not None else {}
    if peak is not None:
        more["peak.json"] = json.dumps(peak, indent=2) + "\n"
    in_out, write_scenario = fleet_scenario(lambda: chosen_fleet_lines(whole, table), written, out,
                                            slos)
    if out is not None:
        write_sized(table, out, args, inputs, "size", {**more, **in_out})
    with_pd_options(lambda: print(table.to_string(index=False)))
    if peak is not None:
        print_peak(peak)
    write_scenario()
    feasible = set(table.loc[table["feasible"], "pool"]) if len(table) else set()
    code = verdict([p for p in dict.fromkeys(table["pool"]) if p not in feasible]
                   if len(table) else [], "no option")
    if missed and not code:
        import sys
        print(f"fleetsim size: the fleet sized at the peak misses the SLOs over the whole "
              f"run for pool(s) {', '.join(missed)}", file=sys.stderr)
        return 1
    return code


def confirm_peak(whole, table, slos, confidence, peak: dict) -> list[str]:
    """--peak: the chosen fleet run over the whole run (``peak`` gets its rows under
    ``confirmed``); the pools whose SLOs it misses there."""
    from sim.planning.peak import confirm
    from sim.planning.chosen import chosen_rows, sized_fleet

    fleet = sized_fleet(whole, table)
    rows = [] if fleet is None else confirm(fleet, list(chosen_rows(table)), slos,
                                            confidence)
    peak["confirmed"] = rows
    return [r["pool"] for r in rows if not r["met"]]


def print_peak(peak: dict) -> None:
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


# size's flags a search mode may refuse, and whether each was given
_GIVEN = {"--max-rate": lambda a: a.max_rate, "--pool": lambda a: a.pool,
          "--report": lambda a: a.report,
          "--write-scenario": lambda a: a.write_scenario,
          "--workers": lambda a: a.workers != 1 or a.executor != "local"}


def refuse_beside(args: argparse.Namespace, mode: str, flags: tuple[str, ...]) -> None:
    """Refuse the first of ``flags`` given beside the search ``mode`` (exit 2)."""
    for flag in flags:
        if _GIVEN[flag](args):
            raise ScenarioError(f"{flag} does not go with {mode}", field=flag)


def size_joint(args: argparse.Namespace, scenario, slos, confidence, out, inputs, whole,
               written: Path | None) -> int:
    """size --joint A,B: two coupled pools sized together (``whole``: the run as given,
    written with the pair chosen to ``written``)."""
    from sim.planning.joint import joint_fleet, joint_size

    refuse_beside(args, "--joint, which searches one pair of pools step by step",
                  ("--max-rate", "--pool", "--report", "--workers"))
    from sim.planning.progress import TrialCounter

    pools = [p.strip() for p in args.joint.split(",")]
    with trial_line(args, "size --joint") as line:
        table = joint_size(scenario, pools, slos, confidence=confidence,
                           counter=TrialCounter(line), thresholds=args.thresholds)
    in_out, write_scenario = fleet_scenario(lambda: joint_fleet(whole, pools, table), written,
                                            out, slos)
    if out is not None:
        write_sized(table, out, args, inputs, "size --joint", in_out)
    with_pd_options(lambda: print(table.to_string(index=False)))
    write_scenario()
    return verdict([] if table["chosen"].any() else [" and ".join(pools)], "no pair")


def size_autoscaled(args: argparse.Namespace, scenario, slos, confidence, out,
                    inputs, whole, written: Path | None) -> int:
    """size --autoscaled: each pool's target-tracking autoscaler sized for the whole run
    (written with the autoscalers chosen to ``written``)."""
    from sim.planning.autoscaled import (autoscaled_fleet, autoscaled_size,
                                         autoscaled_trials, search_plan)

    refuse_beside(args, "--autoscaled", ("--max-rate", "--report"))
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
    with trial_line(args, "size --autoscaled") as line:
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
    in_out, write_scenario = fleet_scenario(lambda: autoscaled_fleet(whole, table), written, out,
                                            slos)
    if out is not None:
        write_sized(table, out, args, inputs, "size --autoscaled", {"teams.json": json.dumps(
            {"cost_usd_per_day_by_team": teams}, indent=2) + "\n", **in_out})
    with_pd_options(lambda: print(table.to_string(index=False)))
    write_scenario()
    for pool, per_team in teams.items():
        if per_team:
            print(f"pool {pool}, chosen autoscaler: cost per day by team: " + ", ".join(
                f"{shown(team)} ${usd:,.2f}" for team, usd in per_team.items()))
    return verdict([p for p, t in teams.items() if t is None], "no target")
