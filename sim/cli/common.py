"""What the commands share: argument types with their bounds, loading a scenario with
its overrides, the files a command reads, progress bars."""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from sim.config import units
from sim.config.errors import ScenarioError


def duration_arg(text: str) -> float:
    try:
        value = units.seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def warmup_arg(text: str) -> float:
    """A duration that may be 0 (``--warmup 0`` keeps every request in the figures)."""
    try:
        value = units.seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text!r}")
    return value


def whole_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None


def positive_int_arg(text: str) -> int:
    value = whole_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def path_arg(text: str) -> str:
    """An argparse type: a path that names something (an empty one would mean here)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder or file")
    return text


MAX_REPLICATIONS = 10_000


MAX_WORKERS = 256


def count_arg(most: int):
    """An argparse type: a whole number from 1 to ``most``."""
    def parse(text: str) -> int:
        value = whole_arg(text)
        if not 1 <= value <= most:
            raise argparse.ArgumentTypeError(f"must be from 1 to {most:,}, got {text!r}")
        return value
    return parse


def share_arg(text: str, what: str) -> float:
    """``text`` as a fraction, written as one (0.05) or in percent (5%): an argparse
    error naming ``what`` ("a tolerance (5% or 0.05)") when it is neither."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as {what}") from None


def tolerance_arg(text: str) -> float:
    value = share_arg(text, "a tolerance (5% or 0.05)")
    if not 0 <= value <= 10:    # NaN fails too: a gate that can never fail is no gate
        raise argparse.ArgumentTypeError(
            f"a tolerance from 0 to 1000% (5% or 0.05), got {text!r}")
    if value > 1 and not text.endswith("%"):
        # a bare 5 is the fraction 5 (500%): most likely 5% was meant
        raise argparse.ArgumentTypeError(
            f"{text!r} is {value:.0%} as a fraction; write {text}% for a percentage, or "
            "a fraction up to 1 (0.05)")
    return value


class Progress:
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


class CountBar:
    """A progress bar of points done on stderr, started at the first update
    (so that an input error is printed alone), and only on a terminal (a log or a pipe
    gets the result lines alone)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not sys.stderr.isatty():
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
            self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(self.label, total=total)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def count_bar(label: str):
    bar = CountBar(label)
    return bar, bar


def load_from_args(args: argparse.Namespace, scenario_path: str | None = None):
    """The scenario at ``scenario_path`` (default: the command's SCENARIO) with the flags'
    overrides (--seed, --duration, --set, --warmup) applied and checked."""
    import sim
    from sim.api import cross_check
    from sim.config.overrides import parse_value, refuse_clash, with_values

    base = sim.load_scenario(args.scenario if scenario_path is None else scenario_path,
                             allow_paths=allowed_paths(args))
    # each flag's values (--seed, --duration, --set, --warmup): a problem they make is
    # blamed on the flag that gave the field, or else on those that make it alone
    groups: dict[str, dict] = {}
    for name in ("seed", "duration"):
        if getattr(args, name, None) is not None:
            groups[f"--{name}"] = {name: getattr(args, name)}
    scenario = sim.with_overrides(base, seed=getattr(args, "seed", None),
                                  duration_s=getattr(args, "duration", None))
    sets = {}
    flags = {"seed": "--seed", "duration": "--duration", "warmup": "--warmup"}
    for item in getattr(args, "set", None) or []:
        path, eq, value = item.partition("=")
        if not eq or not path.strip():
            raise ScenarioError(f"--set {item!r}: write PATH=VALUE, e.g. "
                                "pools.main.replicas=4", field="--set")
        refuse_clash("--set", path, "--set", sets)
        if path in flags and getattr(args, path, None) is not None:
            raise ScenarioError(f"--set {path} and {flags[path]} both set it; give one",
                                field="--set")
        sets[path] = parse_value(value)
    if sets:
        groups["--set"] = dict(sets)
    if getattr(args, "warmup", None) is not None:
        sets["warmup"] = args.warmup
        groups["--warmup"] = {"warmup": args.warmup}
    if not groups:
        return scenario
    given = {path: flag for flag, values in groups.items() for path in values}
    try:        # the whole scenario's checks again: an override may break any of them
        out = cross_check(with_values(scenario, sets))
    except ScenarioError as exc:
        problems = [_blamed(p, base, groups, given) for p in exc.problems]
        if scenario_path is not None:      # one of a command's scenarios: say which
            from dataclasses import replace

            from sim.config.inputs import shown
            problems = [p if p.file else replace(p, file=shown(scenario_path))
                        for p in problems]
        raise ScenarioError.many(problems) from None
    out._flags = given
    return out


def _blamed(problem, base, groups: dict[str, dict], given: dict[str, str]):
    """``problem`` (found with every flag's values) named with the flag that gave its field;
    for a field the scenario file gave, at its line there, with the flags whose values
    alone make it (all of them when none does alone)."""
    from sim.api import cross_check, given_by, located
    from sim.config.errors import Problem
    from sim.config.overrides import with_values

    flag = given_by(given, problem.field or "")
    if flag is not None:
        return Problem(f"with {flag}: {problem.message}", field=problem.field)
    alone = []
    for name, values in groups.items():
        try:
            cross_check(with_values(base, values))
        except ScenarioError as exc:
            if any((p.field, p.message) == (problem.field, problem.message)
                   for p in exc.problems):
                alone.append(name)
    where = located(base, _loc(problem.field)) if problem.field else {}
    return Problem(f"with {' and '.join(alone or groups)}: {problem.message}",
                   **{"field": problem.field, **where})


def _loc(field: str) -> tuple:
    """``pools.main.phases[0].rate`` -> ("pools", "main", "phases", 0, "rate")."""
    return tuple(int(part[1:-1]) if part.startswith("[") else part
                 for part in re.findall(r"\[\d+\]|[^.\[]+", field))


def allowed_paths(args: argparse.Namespace) -> list[str]:
    """Folders given with --allow-path, each an existing folder."""
    found = list(getattr(args, "allow_path", None) or [])
    for folder in found:
        if not folder.strip():
            raise ScenarioError("an empty path (an unset variable?) would allow the working "
                                "folder; name the folder", field="--allow-path")
        if not Path(folder).expanduser().is_dir():
            raise ScenarioError(f"{folder!r} is not a folder", field="--allow-path")
    return found


def add_allow_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-path", action="append", metavar="DIR",
                        help="also read the data files a scenario names (traces, lengths, "
                             "calibrated profiles) from this folder; by default only the "
                             "scenario's folder and fleetsim's shipped data (repeatable)")


def inputs_of(args: argparse.Namespace, scenario=None) -> list[str]:
    """The files a command reads (and those ``scenario`` names: traces, lengths,
    calibrated profiles), which its output must never replace."""
    found = [getattr(args, "scenario", None), getattr(args, "sweep", None)]
    found += list(getattr(args, "scenarios", None) or [])
    found += list(getattr(args, "from_logs", None) or [])
    if scenario is not None:
        from sim.config.data_files import data_files
        found += [str(p) for p in data_files(scenario)]
    return [f for f in found if f]


def slos_from_args(args: argparse.Namespace) -> list:
    from sim.config.slos import checked_slos, parse_slo
    return checked_slos([parse_slo(text) for text in args.slo or []], "--slo", "--slo ")


def scenario_slos(scenario) -> list:
    """The fleet-wide SLOs of the scenario's ``slos:`` block (none without one)."""
    from sim.config.slos import targets
    return targets(scenario.slos) if scenario.slos is not None else []


def with_pd_options(fn) -> None:
    import pandas as pd
    with pd.option_context("display.width", 200, "display.max_columns", 50):
        fn()
