"""The summary dictionary (summary.json) as readable terminal tables.

:func:`summary_table` builds rich tables (overview, latency, pools, teams);
:func:`print_summary` prints them. Only ASCII is used in the text itself,
and rich swaps the borders for ASCII ones when the output cannot take
Unicode; tables fit whatever width the console has.
"""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from sim.output.spans import pool_window

_NONE = "-"
_LATENCY = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e"),
            ("queue", "queue"))
_QUANTILES = ("mean", "p50", "p90", "p95", "p99", "p999")


def fmt_seconds(x: float | None) -> str:
    """A duration with a unit that suits it: ``12.3 ms``, ``1.50 s``, ``2.0 min``, ``3.0 h``."""
    if x is None:
        return _NONE
    if x == 0:
        return "0 ms"
    if abs(x) < 1e-3:
        return f"{x * 1e6:.0f} us"
    if abs(x) < 1.0:
        return f"{x * 1e3:.1f} ms"
    if abs(x) < 120.0:
        return f"{x:.2f} s"
    if abs(x) < 7200.0:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.1f} h"


def _num(x: float | int | None, digits: int = 0) -> str:
    return _NONE if x is None else f"{x:,.{digits}f}"


def plain_number(x: float) -> str:
    """A number as a table shows it, never in scientific notation: thousands separators
    and no decimals from 1,000 up (``12,346``), else three significant figures written
    out (``123``, ``12.3``, ``0.00123``; at most 6 decimals, ``0`` below them)."""
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    import math
    decimals = min(max(2 - math.floor(math.log10(abs(x))), 0), 6)
    text = f"{x:.{decimals}f}"
    return "0" if float(text) == 0 else text


def _sig(x: float | None) -> str:
    """Three significant figures for small values, thousands separators for big ones."""
    return _NONE if x is None else plain_number(x)


def _pct(x: float | None) -> str:
    return _NONE if x is None else f"{100.0 * x:.1f} %"


def _usd(x: float | None) -> str:
    if x is None:
        return _NONE
    return f"${x:,.2f}" if abs(x) >= 1 else f"${x:.4f}"


def _new(title: str, *columns: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left",
                  title_style="bold")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def _overview(s: dict) -> Table:
    req, thr, cost = s.get("requests", {}), s.get("throughput", {}), s.get("cost", {})
    t = _new(f"{s.get('scenario', 'run')} (seed {s.get('seed', _NONE)})", "requests", "value")
    t.add_row("arrived", _num(req.get("arrived")))
    t.add_row("completed", _num(req.get("completed")))
    reasons = req.get("rejected", {}) or {}
    t.add_row("rejected", _num(req.get("rejected_total", sum(reasons.values()))))
    for reason, n in reasons.items():
        t.add_row(f"  {reason or 'unspecified'}", _num(n))
    t.add_row("unfinished at end", _num(req.get("in_flight_at_end")))
    t.add_section()
    t.add_row("arrivals for", fmt_seconds(s.get("duration_s")))
    t.add_row("simulated until", fmt_seconds(s.get("end_s")))
    if thr.get("span_s") is not None:       # the rates' window: first arrival to last end
        t.add_row("active span", fmt_seconds(thr.get("span_s")))
    t.add_row("throughput", f"{_num(thr.get('requests_per_s'), 2)} req/s")
    t.add_row("input tokens", f"{_num(thr.get('input_tokens_per_s'))} tok/s")
    t.add_row("output tokens", f"{_num(thr.get('output_tokens_per_s'))} tok/s")
    t.add_section()
    # the bill twice, each named by its window: a closed loop that ends early is billed
    # on to the end of the run, but its cost per token is over its span
    t.add_row("total cost (whole run)", _usd(cost.get("total_usd")))
    if cost.get("unattributed_usd"):
        t.add_row("  in no team's cost (idle)", _usd(cost.get("unattributed_usd")))
    if cost.get("active_span_usd") is not None:
        t.add_row("cost over the active span", _usd(cost.get("active_span_usd")))
        t.add_row("  per M output tokens", _usd(cost.get("usd_per_million_output_tokens")))
    else:
        t.add_row("cost per M output tokens", _usd(cost.get("usd_per_million_output_tokens")))
    return t


def _latency(s: dict) -> Table:
    t = _new("latency of completed requests", "", *_QUANTILES)
    lat = s.get("latency_s", {})
    for label, key in _LATENCY:
        if key == "itl" and key not in lat:       # a summary written before pooled gaps
            continue
        stats = lat.get(key, {}) or {}
        t.add_row(label, *(fmt_seconds(stats.get(q)) for q in _QUANTILES))
    return t


def _replicas(p: dict) -> str:
    """``tp x replicas``; a pipelined pool (pp > 1) shows its stages too, ``TP2 x PP2 x 3``,
    so the cell accounts for every GPU billed (tp x pp a replica)."""
    mean, peak = p.get("replicas_mean"), p.get("replicas_max")
    pp = p.get("pp") or 1
    shards = f"{p.get('tp', _NONE)}" if pp == 1 else f"TP{p.get('tp', _NONE)} x PP{pp}"
    if mean is None or peak is None or mean == peak:
        return f"{shards} x {_num(peak if peak is not None else mean)}"
    return f"{shards} x {mean:.1f} (max {peak})"


def _step_times(p: dict) -> str:
    """Where the pool's step times came from, short: the full name is in summary.json."""
    label = str(p.get("cost_model", _NONE))
    if label.startswith("calibrated profiles/calibrated/gpu/"):
        engine = label.split("/")[-2]
        return f"measured {engine} kernels"
    if label.startswith("calibrated "):
        return "calibrated " + label.rsplit("/", 1)[-1]
    return label


_POOL_ROWS = (          # each given the pool's figures, those over the active span in place
    ("model", lambda p: str(p.get("model", _NONE))),
    ("hardware", lambda p: str(p.get("hardware", _NONE))),
    ("TP x replicas", _replicas),
    ("step times", _step_times),
    ("GPU-hours", lambda p: _sig(p.get("gpu_hours"))),
    ("cost", lambda p: _usd(p.get("cost_usd"))),
    ("busy", lambda p: _pct(p.get("busy_frac"))),
    ("MFU", lambda p: _pct(p.get("mfu"))),
    ("MBU", lambda p: _pct(p.get("mbu"))),
    ("KV util (mean)", lambda p: _pct(p.get("kv_util_mean"))),
    ("max running seqs", lambda p: _num(p.get("max_running_seqs"))),
)


def _pools(s: dict) -> Table:
    """One column per pool: stays narrow however many metrics there are. Every figure is
    over the run's active span, as the rates are (but the peak replicas and running
    sequences, over the run)."""
    pools = s.get("pools", {})
    in_span = any("active_span" in p for p in pools.values())
    t = _new("pools (over the active span)" if in_span else "pools", "", *pools)
    windowed = [{**p, **pool_window(p)} for p in pools.values()]
    for label, get in _POOL_ROWS:
        t.add_row(label, *(get(p) for p in windowed))
    return t


def _teams(s: dict) -> Table:
    t = _new("teams", "team", "requests", "completed", "rejected", "input tok",
             "output tok", "cost (whole run)")
    for name, tm in s.get("teams", {}).items():
        t.add_row(name, _num(tm.get("requests")), _num(tm.get("completed")),
                  _num(tm.get("rejected")), _num(tm.get("input_tokens")),
                  _num(tm.get("output_tokens")), _usd(tm.get("cost_usd")))
    return t


def slo_value_text(metric: str, value: float | None) -> str:
    """An SLO metric's value (or target) as read: a time with its unit, attainment in percent."""
    if value is None:
        return _NONE
    return _pct(value) if metric == "attainment" else fmt_seconds(value)


def _slo(s: dict) -> Table | None:
    """The SLO verdict: one row per objective (fleet-wide, each team's, each stream's), with the
    measured value and the margin, and the goodput."""
    slo = s.get("slo")
    if not slo:
        return None
    title = "SLOs: " + ("all met" if slo.get("met") else "MISSED")
    t = _new(title, "objective", "target", "measured", "margin", "verdict")
    scopes = ([("", slo["fleet"])] if slo.get("fleet") else []) + \
        [(f"{team}: ", v) for team, v in (slo.get("teams") or {}).items()] + \
        [(f"stream {name}: ", v) for name, v in (slo.get("streams") or {}).items()]
    for prefix, scope in scopes:
        for metric, o in (scope.get("objectives") or {}).items():
            margin = o.get("margin")
            t.add_row(prefix + metric, slo_value_text(metric, o.get("target")),
                      slo_value_text(metric, o.get("measured")),
                      _NONE if margin is None else f"{margin * 100:+.1f}%",
                      "met" if o.get("met") else "MISSED")
        goodput = scope.get("goodput_requests_per_s")
        t.add_row(prefix + "goodput", "", f"{_num(goodput, 2)} req/s", "",
                  f"{_pct(scope.get('attainment'))} within every bound")
    return t


def summary_table(summary: dict) -> list[Table]:
    """The summary as tables: the SLO verdict (when the scenario sets SLOs), overview,
    latency, pools, teams."""
    slo = _slo(summary)
    return ([slo] if slo is not None else []) + [
        _overview(summary), _latency(summary), _pools(summary), _teams(summary)]


def print_summary(summary: dict, console: Console | None = None) -> None:
    """Print :func:`summary_table` to ``console`` (standard output by default). A figure
    is never cut: on a terminal a narrow column folds its cells onto more lines; into a
    file or a CI log (no width to respect) each table takes the width it needs."""
    # the cells are figures and names as written: no markup or emoji codes read in them
    # (a team named "[red]x" prints as itself), which also halves rich's time per cell
    console = console or Console(markup=False, emoji=False)
    for table in summary_table(summary):
        for column in table.columns:
            column.overflow = "fold"
        if console.is_terminal:
            console.print(table)
        else:
            needed = Measurement.get(console, console.options.update_width(10_000),
                                     table).maximum
            width = console.width
            console.width = max(needed, width)      # print's own width is capped by it
            try:
                console.print(table)
            finally:
                console.width = width
