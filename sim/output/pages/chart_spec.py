"""What the run report's charts are made of: the form of a chart's data, its building
blocks, and the run's columns the charts read (``RunData``). The charts themselves:
``latency_charts.py``, ``request_charts.py``, ``load_charts.py``; the page's set of them:
``chart_data.py``.

A chart is a dictionary: its ``name``, ``title`` (the scenario's name and what it shows),
``x`` axis, and one or more ``panels`` stacked over that x axis (each a ``y`` axis, its
``series`` and its ``rules``: dotted lines at SLO targets and means). An axis says its
``label`` (units in it: ms, %, hh:mm), whether it is ``log``, its ``range`` when fixed and its
tick ``format``: ``"number"`` (plain, ``1,000`` or ``0.05``, never ``1e+03``), ``"percent"``,
``"hhmm"`` (time past an hour, ticks every ``step_s``) or ``"category"`` (``categories``
by index). A series holds its own ``x`` and ``y``; the page joins them on x.
"""
from __future__ import annotations

import numpy as np

from sim.output.columns import Coded, Table

MS = 1e3
HOUR_S = 3600.0
MAX_TEAMS = 20          # series or bars per team: the busiest ones, as the PNGs
# steps between hh:mm ticks (s): the smallest giving at most 8 ticks over the axis
CLOCK_STEPS_S = (600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
DONE_COLUMNS = ("arrival_s", "ttft_s", "tpot_s", "e2e_s", "output_tokens", "pool", "team")


def json_list(values, digits: int = 6) -> list:
    """``values`` as a JSON list: rounded to ``digits`` decimals, NaN and inf as null."""
    arr = np.round(np.asarray(values, dtype=np.float64), digits)
    return [v if v == v and abs(v) != float("inf") else None for v in arr.tolist()]


def codes_and_names(column) -> tuple[np.ndarray, list[str]]:
    """A column of names as (codes per row, names); -1 for none."""
    if isinstance(column, Coded):
        return column.codes.astype(np.int64), [str(n) for n in column.names]
    names, codes = np.unique(np.asarray(column, dtype=str), return_inverse=True)
    return codes.astype(np.int64), [str(n) for n in names]


def rows_named(column, name: str) -> np.ndarray:
    codes, names = codes_and_names(column)
    return codes == names.index(name) if name in names else np.zeros(len(codes), bool)


def clock_step_s(span_s: float) -> int:
    """The step between an hh:mm axis's ticks over ``span_s``: the smallest of
    :data:`CLOCK_STEPS_S` giving at most 8 ticks."""
    return next((s for s in CLOCK_STEPS_S if span_s / s <= 8), CLOCK_STEPS_S[-1])


def time_axis(span_s: float, label: str = "simulated time") -> dict:
    """An x axis over simulated time: seconds for an hour or less, hh:mm past an hour."""
    if span_s <= HOUR_S:
        return {"label": f"{label} (s)", "log": False, "format": "number",
                "range": [0.0, max(span_s, 1.0)]}
    step = clock_step_s(span_s)
    return {"label": f"{label} (hh:mm)", "log": False, "format": "hhmm", "step_s": step,
            "range": [0.0, span_s]}


def axis_spec(label: str, *, log: bool = False, range_=None, fmt: str = "number") -> dict:
    return {"label": label, "log": log, "format": fmt,
            "range": None if range_ is None else [float(range_[0]), float(range_[1])]}


def series_spec(label: str, x, y, *, kind: str = "line", colour: int = 0, dash: bool = False,
            digits: int = 6, **more) -> dict:
    return {"label": label, "x": json_list(x, 6), "y": json_list(y, digits), "kind": kind,
            "colour": colour, "dash": dash, **more}


def rule_spec(axis: str, value: float, label: str) -> dict:
    return {"axis": axis, "value": float(value), "label": label}


def slo_targets(scenario, metric: str) -> list[tuple[str, float]]:
    """The fleet-wide SLO targets (s) on ``metric``, as ``(statistic, target)``."""
    slos = getattr(scenario, "slos", None)
    return [(stat, float(getattr(slos, f"{metric}_{stat}")))
            for stat in ("mean", "p50", "p90", "p95", "p99")
            if getattr(slos, f"{metric}_{stat}", None) is not None]


def ms_label(value_ms: float) -> str:
    return f"{value_ms:,.6g}" if value_ms < 1000 else f"{value_ms:,.0f}"


class RunData:
    """The run's columns the charts read, picked once."""

    def __init__(self, results) -> None:
        self.results = results
        self.scenario = results.scenario
        self.summary = results.summary
        self.name = str(self.summary.get("scenario") or self.scenario.name)
        self.req = results.tables.requests
        self.ts = results.tables.timeseries
        # the completed requests' columns the charts read (not the whole table's)
        done = Table({c: self.req[c] for c in DONE_COLUMNS}) if len(self.req) else self.req
        self.done = done[rows_named(self.req["status"], "completed")] if len(self.req) \
            else done
        pools = [str(p) for p in self.summary.get("pools", {})]
        if len(self.req):
            pools += codes_and_names(self.req["pool"])[1]
        self.pools = list(dict.fromkeys(pools))
        self.teams = self._busiest(self.req) if len(self.req) else []

    @staticmethod
    def _busiest(req) -> list[str]:
        codes, names = codes_and_names(req["team"])
        counts = np.bincount(codes[codes >= 0], minlength=len(names))
        ranked = sorted((n for n in range(len(names)) if counts[n]),
                        key=lambda n: (-counts[n], names[n]))[:MAX_TEAMS]
        return sorted(names[n] for n in ranked)

    def title(self, what: str) -> str:
        return f"{self.name}: {what}"

