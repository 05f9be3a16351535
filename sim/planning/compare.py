"""`fleetsim compare A B`: key figures side by side, with differences.

Each run's row holds the run's figures (:func:`sim.planning.sweep.summary_row`) and, per
pool, what its fleet was (hardware, TP, PP, weight and KV dtypes, replicas, GPUs, cost).
Each later run is set against the first: its change in percent where both are numbers,
and a mark: ``better`` or ``worse`` where the figure has a direction (lower latency,
cost or refusals; higher throughput, goodput, attainment, SLO margin), ``differs`` for
a fleet attribute (hardware, TP, dtypes, replicas, GPUs), ``same`` where equal.
"""
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
from sim.output.spans import pool_window
from sim.planning.sweep import POOL_FIELDS, mean_gpus, rates_window, summary_row


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
    return ["figure", *labels, *(c for lb in labels[1:]
                                 for c in (f"{lb} vs {labels[0]} %", f"{lb} vs {labels[0]}"))]


# a pool's fleet: what it ran on and how much of it, where a difference is neither better
# nor worse (a run's own figures follow, as summary_row gives them)
FLEET_FIELDS = ("hardware", "tp", "pp", "weight_dtype", "kv_dtype", "replicas_mean",
                "replicas_max", "gpus_mean", "cost_usd")
_FLEET = frozenset(FLEET_FIELDS) - {"cost_usd"} | {"gpu_hours"}
_LATENCIES = ("ttft_", "tpot_", "e2e_", "queue_", "max_itl_")
_HIGHER = frozenset({"completed", "slo_met", "slo_margin_min", "attainment"})


def direction(figure: str) -> int | None:
    """+1 where a higher figure is better (throughput, goodput, attainment, SLO margin),
    -1 where lower is (latency, cost, refusals), 0 for a fleet attribute (which differs,
    no better nor worse), None where neither is known (the load: arrivals)."""
    key = figure.rpartition(".")[2]            # a pool's figure: POOL.FIELD
    if key in _FLEET:
        return 0
    if "usd" in key or key == "rejected" or key.startswith(_LATENCIES):
        return -1
    if key in _HIGHER or "per_s" in key:
        return 1
    return None


def fleet_row(summary: dict) -> dict:
    """The run's figures, each pool's fleet (FLEET_FIELDS) before its other figures."""
    row = summary_row(summary)
    pools = summary.get("pools", {})
    out = {k: v for k, v in row.items()
           if k not in {f"{p}.{f}" for p in pools for f in POOL_FIELDS}}
    _, window_s = rates_window(summary)
    for pool, fig in pools.items():
        window = pool_window(fig)               # the row's window: the active span
        fleet = {**fig, **{k: window.get(k) for k in ("replicas_mean", "cost_usd")},
                 "gpus_mean": mean_gpus(fig, window_s, window)}
        out.update({f"{pool}.{f}": fleet.get(f) for f in FLEET_FIELDS})
        out.update({f"{pool}.{f}": row[f"{pool}.{f}"] for f in POOL_FIELDS})
    return out


def _value(v) -> float | str | None:
    if isinstance(v, bool):
        return "met" if v else "MISSED"
    if isinstance(v, (int, float)):
        return float(v)
    return v if isinstance(v, str) else None


def mark(figure: str, base, value) -> str | None:
    """``value`` (a later run's) against ``base`` (the first run's): better, worse, differs
    (a fleet attribute, or a figure of no known direction), same; None where a side has
    none."""
    if base is None or value is None:
        return None
    if base == value:
        return "same"
    way = direction(figure)
    if way in (1, -1) and figure.rpartition(".")[2] == "slo_met":
        return "better" if value == "met" else "worse"
    if way in (1, -1) and isinstance(base, float) and isinstance(value, float):
        return "better" if (value - base) * way > 0 else "worse"
    return "differs"


def compare(summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per figure, one column per run, and for each later run its change from the
    first in percent (none where a side has no number or the first is 0) and its mark
    (:func:`mark`)."""
    rows = {label: fleet_row(s) for label, s in summaries.items()}
    labels = list(rows)
    first = labels[0]
    table = []
    for key in dict.fromkeys(k for r in rows.values() for k in r):
        row: dict = {"figure": key}
        for label in labels:
            row[label] = _value(rows[label].get(key))
        base = row[first]
        for label in labels[1:]:
            v = row[label]
            numbers = isinstance(v, float) and isinstance(base, float)
            # over the first's size: a margin from -14 to +0.8 is a rise, not a fall
            row[f"{label} vs {first} %"] = (v - base) / abs(base) * 100.0 \
                if numbers and base else None
            row[f"{label} vs {first}"] = mark(key, base, v)
        table.append(row)
    return pd.DataFrame(table, columns=_columns(labels))


def _is_mark(column: str) -> bool:
    """A later run's better/worse column (no run's label holds ' vs ': see labels_for)."""
    return " vs " in column and not column.endswith(" %")


def render(table: pd.DataFrame) -> str:
    """The table as text: four significant figures, thousands separated, changes signed,
    '-' where there is no number."""
    def cell(column: str, value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "" if _is_mark(column) else "-"
        if isinstance(value, str):       # a hardware or dtype name read from a summary
            return "" if value == "same" and _is_mark(column) else shown(value)
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
