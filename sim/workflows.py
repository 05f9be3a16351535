"""The planning commands as Python calls: ``sim.size``, ``sim.sweep``, ``sim.compare``,
``sim.check``.

Each is a thin wrapper over what its ``fleetsim`` command runs (:mod:`sim.planning`),
with the command's checks and none of its printing: a table comes back as a pandas
DataFrame, one flat row per option, point or figure; a bad argument is a
:class:`ScenarioError` naming it, as the command's flag would be. What the commands
write (``--out``, ``--report``) is left to the caller (``DataFrame.to_csv``); the
search modes of ``fleetsim size`` beyond the plain one (``--peak``, ``--window``,
``--joint``, ``--autoscaled``, ``--max-rate``, ``--write-scenario``) are the command's.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import pandas as pd

from sim.config.errors import ScenarioError
from sim.config.scenario import Scenario
from sim.config.slos import Slo
from sim.output.results import Results
from sim.planning.check import Verdict

SloSpec = Union[Sequence[Union[str, Slo]], Mapping[str, Any], None]
Run = Union[Results, Scenario, str, Path, dict]

DEFAULT_TOLERANCE = 0.05


def _slos(slos: SloSpec, scenario: Scenario | None = None) -> list[Slo]:
    """SLOs as ``["ttft_p99=2s", ...]``, ``{"ttft_p99": "2s"}`` or :class:`Slo` records,
    each metric once; none given: the scenario's fleet-wide ``slos:`` block."""
    from sim.config.slos import checked_slos, parse_slo, targets
    if isinstance(slos, Mapping):
        slos = [f"{metric}={value}" for metric, value in slos.items()]
    if isinstance(slos, str):
        slos = [slos]
    out = checked_slos([s if isinstance(s, Slo) else parse_slo(str(s)) for s in slos or []],
                       "slos", "slos: ")
    if not out and scenario is not None and scenario.slos is not None:
        out = targets(scenario.slos)
    return out


def size(scenario: Scenario, slos: SloSpec = None, *, pools: Sequence[str] | None = None,
         workers: int = 1) -> pd.DataFrame:
    """``fleetsim size``: for each option of each pool's ``sizing:`` block (hardware, TP,
    PP, dtypes), the fewest replicas meeting ``slos`` (default: the scenario's ``slos:``
    block), and what that costs. One row per pool and option, cheapest feasible first
    per pool: ``pool``, ``hardware``, ``tp``, ``weight_dtype``, ``replicas``,
    ``feasible``, ``cost_usd_per_h``, each SLO's figure, ``note`` and more (the columns
    of size.csv). ``workers`` searches the options side by side in local processes."""
    from sim.planning.size import size as size_table
    found = _slos(slos, scenario)
    if not found:
        raise ScenarioError("give at least one SLO (slos=['ttft_p99=2s']) or an `slos:` "
                            "block in the scenario", field="slos")
    for pool in pools or []:
        if pool not in scenario.pools:
            raise ScenarioError(f"unknown pool '{pool}'; pools: {', '.join(scenario.pools)}",
                                field="pools")
    return size_table(scenario, found, list(pools) if pools else None, workers=workers)


def sweep(scenario: Scenario, vary: Mapping[str, Any], *, workers: int = 1) -> pd.DataFrame:
    """``fleetsim sweep``: run every combination of ``vary``'s values, a dotted path to a
    list of values (``{"pools.main.replicas": [1, 2, 4]}``) or to the command's text
    (``"1..4"``, ``"1,2,4"``). One row per point: the varied fields, then the run's
    figures (``ttft_p99_s``, ``requests_per_s``, ``cost_usd``, ... and ``POOL.FIELD``
    per pool), as the command's CSV table. Checked before any run as the command's
    ``--vary`` is (each point's scenario, no value twice, at most 10,000 points)."""
    from sim.config.overrides import check_distinct, check_grid, parse_vary
    from sim.planning.sweep import sweep as sweep_table
    if not isinstance(vary, Mapping) or not vary:
        raise ScenarioError("vary= maps dotted paths to their values, e.g. "
                            "{'pools.main.replicas': [1, 2, 4]}", field="vary")
    varies = []
    for path, values in vary.items():
        if isinstance(values, str):
            varies.append(parse_vary(f"{path}={values}"))
        elif isinstance(values, Iterable) and not isinstance(values, Mapping):
            values = list(values)
            if not values:
                raise ScenarioError(f"{path}: no values to vary", field="vary")
            varies.append((path, values))
        else:
            raise ScenarioError(f"{path}: give a list of values or a range text ('1..4'), "
                                f"not a {type(values).__name__}", field="vary")
    check_grid(varies)
    check_distinct(scenario, varies)
    return sweep_table(scenario, varies, workers=workers)


def compare(runs: Mapping[str, Run] | Sequence[Run]) -> pd.DataFrame:
    """``fleetsim compare``: key figures of 2 to 16 runs side by side. A run is a
    :class:`Results`, a scenario (run now), a result folder ``fleetsim run`` wrote or a
    scenario file (run now), or a summary dict; give a mapping to name the columns.
    One row per figure (``figure``), a column per run, and for each later run its change
    from the first in percent (``"B vs A %"``) and a mark (``"B vs A"``: better, worse,
    differs, same)."""
    from sim.planning.compare import MAX_RUNS, compare as compare_table
    if isinstance(runs, Mapping):
        labels, items = [str(k) for k in runs], list(runs.values())
    elif isinstance(runs, (str, Path)) or not isinstance(runs, Sequence):
        raise ScenarioError("compare takes a list (or a mapping of labels) of runs",
                            field="runs")
    else:
        items = list(runs)
        labels = _labels(items)
    if not 2 <= len(items) <= MAX_RUNS:
        raise ScenarioError(f"give 2 to {MAX_RUNS} runs, not {len(items)}", field="runs")
    return compare_table(dict(zip(labels, [_summary(r) for r in _loaded(items)])))


def _loaded(items: list[Run]) -> list:
    """Every run read (result folders) or loaded (scenario files) before any runs."""
    import sim
    from sim.planning.compare import load_run
    out = []
    for item in items:
        if isinstance(item, (str, Path)):
            item = load_run(str(item), sim.load_scenario)
        elif not isinstance(item, (Results, Scenario, dict)):
            raise ScenarioError(f"a run is a Results, a Scenario, a result folder, a "
                                f"scenario file or a summary dict, not a "
                                f"{type(item).__name__}", field="runs")
        out.append(item)
    return out


def _summary(run) -> dict:
    import sim
    if isinstance(run, Results):
        return run.summary
    if isinstance(run, Scenario):
        return sim.run(run).summary
    return run


def _labels(items: list[Run]) -> list[str]:
    """A column name per run (the folder's or file's name, the scenario's name),
    numbered by position ('2: x') where two share one."""
    from sim.planning.compare import labels_for
    names = []
    for i, item in enumerate(items):
        if isinstance(item, (str, Path)):
            names.append(labels_for([str(item)])[0])
        elif isinstance(item, (Results, Scenario)):
            scenario = item.scenario if isinstance(item, Results) else item
            names.append(scenario.name)
        else:
            names.append(f"run {i + 1}")
    if len(dict.fromkeys(names)) == len(names):
        return names
    return [f"{i + 1}: {n}" for i, n in enumerate(names)]


@dataclass(frozen=True)
class CheckResult:
    """What ``fleetsim check`` decides: ``ok`` (its exit code 0), the lines it prints,
    and a :class:`~sim.planning.check.Verdict` per scenario (``scenario``, the problems
    found, the figures now and the baseline's)."""

    ok: bool
    lines: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    def table(self) -> pd.DataFrame:
        """One row per scenario: ``scenario``, ``ok``, ``problems`` (joined by '; ')."""
        return pd.DataFrame([{"scenario": v.scenario, "ok": not v.problems,
                              "problems": "; ".join(v.problems)} for v in self.verdicts],
                            columns=["scenario", "ok", "problems"])


def check(scenarios: Sequence[str | Path], baseline: str | Path, *, slos: SloSpec = None,
          tolerance: float = DEFAULT_TOLERANCE, update: bool = False,
          set: Mapping[str, Any] | None = None) -> CheckResult:
    """``fleetsim check``: each scenario file's required replicas per pool and latencies
    against the ``baseline`` JSON, failing (``ok`` False) where a figure drifted past
    ``tolerance`` (a fraction, 0.05 = 5%) or the SLOs (``slos``, else each scenario's
    ``slos:`` block) break as configured. ``update=True`` records the figures in the
    baseline instead, replacing only a baseline fleetsim wrote. ``set`` overrides fields
    of every scenario, as ``--set`` does (and is recorded, as the command records it)."""
    import sim
    from sim.output.files.output_paths import check_file
    from sim.planning.check import check as run_check, is_baseline
    if isinstance(scenarios, (str, Path)):
        scenarios = [scenarios]
    paths = [str(p) for p in scenarios]
    if not paths:
        raise ScenarioError("give at least one scenario file to check", field="scenarios")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
            or not (math.isfinite(tolerance) and 0 <= tolerance <= 10):
        raise ScenarioError(f"a tolerance is a fraction from 0 to 10 (0.05 = 5%), got "
                            f"{tolerance!r}", field="tolerance")
    baseline = Path(baseline)
    if update:
        check_file(baseline, kind="a `fleetsim check` baseline", is_kind=is_baseline,
                   inputs=paths)
    overrides = dict(set or {})
    sets = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in overrides.items()]
    code, lines, verdicts = run_check(
        paths, baseline, _slos(slos), float(tolerance), update,
        load=lambda p: sim.with_overrides(sim.load_scenario(p), set=overrides), sets=sets)
    return CheckResult(code == 0, lines, verdicts)
