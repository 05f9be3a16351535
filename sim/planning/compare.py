"""`fleetsim compare A B`: key figures side by side, with differences."""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

import sim
from sim.config.errors import ScenarioError
from sim.config.inputs import InputFileError, read_bytes, shown
from sim.config.scenario import Scenario
from sim.planning.check import MAX_FIGURE
from sim.planning.sweep import summary_row


def load_run(path: str, load: Callable[[str], Scenario]) -> dict | Scenario:
    """A result folder's summary.json, or the scenario ``load`` reads (to run)."""
    p = Path(path)
    if p.is_dir():
        return _read_summary(p / "summary.json")
    if p.name == "summary.json" or p.suffix.lower() == ".json":
        raise ScenarioError(f"compare takes a result folder (the one holding "
                            f"summary.json) or a scenario to run; give "
                            f"{shown(p.parent) if p.name == 'summary.json' else 'its folder'}",
                            file=shown(p), field="compare")
    return load(path)


def load_summaries(paths: list[str], allow_paths: Iterable[str] = (),
                   load: Callable[[str], Scenario] | None = None) -> list[dict]:
    """Each run's summary: a result folder's, or its scenario run now (every run read,
    and every scenario loaded, before any runs). ``load`` reads a scenario (the CLI's
    applies --set)."""
    load = load or (lambda p: sim.load_scenario(p, allow_paths=allow_paths))
    runs = [load_run(p, load) for p in paths]
    return [r if isinstance(r, dict) else sim.run(r).summary for r in runs]


def load_summary(path: str, allow_paths: Iterable[str] = ()) -> dict:
    """A result folder's summary.json, or a scenario run now."""
    return load_summaries([path], allow_paths)[0]


def _sensible(data) -> bool:
    """Every number in ``data`` finite and of sensible size (walked without recursion)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, bool) or node is None or isinstance(node, str):
            continue
        elif isinstance(node, int) and abs(node) > MAX_FIGURE:
            return False
        elif isinstance(node, float) and not (math.isfinite(node) and abs(node) <= MAX_FIGURE):
            return False            # fleetsim writes strict JSON: no NaN, no Infinity
    return True


# figures a run may write below zero: the tightest SLO's margin is negative where an SLO
# was missed (a failing "before" is the comparison a planner most wants)
SIGNED_FIGURES = frozenset({"slo_margin_min"})


def _read_summary(path: Path) -> dict:
    """A summary.json, as a located error that does not quote it when it is not one."""
    try:
        data = json.loads(read_bytes(path).decode("utf-8"))
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=shown(path)) from None
    except (ValueError, RecursionError):    # not UTF-8, not JSON, a number too long
        data = None
    if isinstance(data, dict) and not _sensible(data):
        data = None
    pools = data.get("pools") if isinstance(data, dict) else None
    if (not isinstance(pools, dict) or not pools
            or not all(isinstance(v, dict) for v in pools.values())
            or not isinstance(data.get("latency_s"), dict)
            or not isinstance(data.get("throughput"), dict)):
        raise ScenarioError("not a summary.json that `fleetsim run` wrote", file=shown(path))
    slo = data.get("slo")
    if not (slo is None or isinstance(slo, dict) and (
            slo.get("fleet") is None or isinstance(slo["fleet"], dict))):
        raise ScenarioError("its slo is not an object of the verdict and the fleet's "
                            "goodput: not a summary.json that `fleetsim run` wrote",
                            file=shown(path))
    for figure, value in summary_row(data).items():
        if value is None or (figure == "slo_met" and isinstance(value, bool)):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            what = type(value).__name__
            raise ScenarioError(f"figure {figure} is a {what}, not a number: not a "
                                "summary.json that `fleetsim run` wrote", file=shown(path))
        if value < 0 and figure not in SIGNED_FIGURES:
            raise ScenarioError(f"figure {figure} is {value:g}, below zero (no count, "
                                "latency, rate or cost is): not a summary.json that "
                                "`fleetsim run` wrote", file=shown(path))
    return data


MAX_RUNS = 16


def labels_for(paths: list[str]) -> list[str]:
    """A short name per run (its folder's or scenario file's name); numbered by position
    ('2: x') where two runs share a name or one would read as another column."""
    names = [Path(p).name if Path(p).is_dir() else Path(p).stem for p in paths]
    names = [shown(n or str(p)) for n, p in zip(names, paths)]     # printable
    columns = _columns(names)
    if len(set(columns)) == len(columns) and not any(" vs " in n for n in names):
        return names
    return [f"{i + 1}: {n}" for i, n in enumerate(names)]


def _columns(labels: list[str]) -> list[str]:
    return ["figure", *labels, *(f"{lb} vs {labels[0]} %" for lb in labels[1:])]


def compare(summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per figure, one column per run, and each later run's change from the
    first in percent (none where a side has no number or the first is 0)."""
    rows = {label: summary_row(s) for label, s in summaries.items()}
    labels = list(rows)
    first = labels[0]
    table = []
    for key in dict.fromkeys(k for r in rows.values() for k in r):
        row: dict = {"figure": key}
        for label in labels:
            v = rows[label].get(key)
            row[label] = (("met" if v else "MISSED") if isinstance(v, bool) else
                          float(v) if isinstance(v, (int, float)) else None)
        base = row[first]
        for label in labels[1:]:
            v = row[label]
            numbers = isinstance(v, float) and isinstance(base, float)
            row[f"{label} vs {first} %"] = (v - base) / base * 100.0 if numbers and base \
                else None
        table.append(row)
    return pd.DataFrame(table, columns=_columns(labels))


def render(table: pd.DataFrame) -> str:
    """The table as text: four significant figures, thousands separated, changes signed,
    '-' where there is no number."""
    def cell(column: str, value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        if isinstance(value, str):
            return value
        if column.endswith(" %"):
            return f"{value:+,.1f}%"
        return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"

    columns = list(table.columns)
    # a figure's name holds pool and team names read from the summaries: a crafted one
    # must not reach the terminal as control sequences
    cells = [[shown(str(v)) if c == "figure" else cell(c, v) for c, v in zip(columns, row)]
             for row in table.itertuples(index=False)]
    columns = [shown(c) for c in columns]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(columns, widths)))]
    lines += ["  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                        for i, (v, w) in enumerate(zip(r, widths))) for r in cells]
    return "\n".join(lines)
