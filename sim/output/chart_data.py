"""The run report's charts as data: what each chart draws, made with numpy from the run's
columns (no matplotlib, no pandas), for the page to draw in the browser
(``static/report_charts.js``, with uPlot).

A chart is a dictionary: its ``name``, ``title`` (the scenario's name and what it shows),
``x`` axis, and one or more ``panels`` stacked over that x axis (each a ``y`` axis, its
``series`` and its ``rules``: dotted lines at SLO targets and means). An axis says its
``label`` (units in it: ms, %, hh:mm), whether it is ``log``, its ``range`` when fixed and its
tick ``format``: ``"number"`` (plain, ``1,000`` or ``0.05``, never ``1e+03``), ``"percent"``,
``"hhmm"`` (time past an hour, ticks every ``step_s``) or ``"category"`` (``categories``
by index). A series holds its own ``x`` and ``y``; the page joins them on x.

Sizes stay bounded whatever the run's length: a share-slower curve is drawn through at
most :data:`CCDF_POINTS` ranks of its values (even in rank, and log-spaced into the tail
so p99.9 is as exact as the median), latency over time is a percentile per one of
:data:`TIME_BINS` bins, and a time series of more than :data:`MAX_TIME_POINTS`
samples is averaged over buckets of samples.
"""
from __future__ import annotations

import numpy as np

from sim.config.slos import LATENCIES as SLO_LATENCIES, targets
from sim.output.columns import Coded, Table
from sim.output.slo import POLICY_REFUSALS, within_every_bound

MS = 1e3
HOUR_S = 3600.0
MAX_TEAMS = 20          # series or bars per team: the busiest ones, as the PNGs
CCDF_POINTS = 1200      # per share-slower curve: half even in rank, half log-spaced in the tail
MAX_TIME_POINTS = 2000  # per series over time
TIME_BINS = 60          # latency percentiles over time (the PNG's too)
LENGTH_BINS = 40
LOG_DECADES = 2.0       # a log x axis when the values span more than this many decades
# steps between hh:mm ticks (s): the smallest giving at most 8 ticks over the axis
CLOCK_STEPS_S = (600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
# the statistic an SLO bounds, as the share of requests above its target it allows
SHARE_ABOVE = {"p50": 0.5, "p90": 0.1, "p95": 0.05, "p99": 0.01}
DONE_COLUMNS = ("arrival_s", "ttft_s", "tpot_s", "e2e_s", "output_tokens", "pool", "team")
LATENCIES = (("ttft", "time to first token"), ("tpot", "time per output token"),
             ("e2e", "end-to-end latency"))


def _list(values, digits: int = 6) -> list:
    """``values`` as a JSON list: rounded to ``digits`` decimals, NaN and inf as null."""
    arr = np.round(np.asarray(values, dtype=np.float64), digits)
    return [v if v == v and abs(v) != float("inf") else None for v in arr.tolist()]


def _groups(column) -> tuple[np.ndarray, list[str]]:
    """A column of names as (codes per row, names); -1 for none."""
    if isinstance(column, Coded):
        return column.codes.astype(np.int64), [str(n) for n in column.names]
    names, codes = np.unique(np.asarray(column, dtype=str), return_inverse=True)
    return codes.astype(np.int64), [str(n) for n in names]


def _rows_of(column, name: str) -> np.ndarray:
    codes, names = _groups(column)
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


def _axis(label: str, *, log: bool = False, range_=None, fmt: str = "number") -> dict:
    return {"label": label, "log": log, "format": fmt,
            "range": None if range_ is None else [float(range_[0]), float(range_[1])]}


def _series(label: str, x, y, *, kind: str = "line", colour: int = 0, dash: bool = False,
            digits: int = 6, **more) -> dict:
    return {"label": label, "x": _list(x, 6), "y": _list(y, digits), "kind": kind,
            "colour": colour, "dash": dash, **more}


def _rule(axis: str, value: float, label: str) -> dict:
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
        self.done = done[_rows_of(self.req["status"], "completed")] if len(self.req) \
            else done
        pools = [str(p) for p in self.summary.get("pools", {})]
        if len(self.req):
            pools += _groups(self.req["pool"])[1]
        self.pools = list(dict.fromkeys(pools))
        self.teams = self._busiest(self.req) if len(self.req) else []

    @staticmethod
    def _busiest(req) -> list[str]:
        codes, names = _groups(req["team"])
        counts = np.bincount(codes[codes >= 0], minlength=len(names))
        ranked = sorted((n for n in range(len(names)) if counts[n]),
                        key=lambda n: (-counts[n], names[n]))[:MAX_TEAMS]
        return sorted(names[n] for n in ranked)

    def title(self, what: str) -> str:
        return f"{self.name}: {what}"


def _ccdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The share of ``values`` above each of at most :data:`CCDF_POINTS` of them (sorted),
    the largest (share 0, off a log axis) left off."""
    x = np.sort(values)
    n = len(x)
    if n > CCDF_POINTS:
        even = np.linspace(0, n - 1, CCDF_POINTS // 2)
        tail = n - np.geomspace(1, n, CCDF_POINTS // 2)
        rank = np.unique(np.concatenate([even, tail]).round().astype(np.int64))
    else:
        rank = np.arange(n)
    x, above = x[rank], 1.0 - (rank + 1) / n
    # of equal values, the last (the share above them all): x is the page's join key
    last = len(x) - 1 - np.unique(x[::-1], return_index=True)[1]
    x, above = x[last], above[last]
    keep = above > 0
    return x[keep], above[keep]


def ccdf_chart(run: RunData, metric: str, what: str) -> dict:
    """The share of completed requests slower than x (ms) on a log y axis, per pool and
    (with two or more) per team, with each fleet-wide SLO target on ``metric``."""
    column = f"{metric}_s"
    values_all = np.asarray(run.done[column], dtype=np.float64) if len(run.done) else \
        np.zeros(0)
    finite = np.isfinite(values_all)
    values = values_all[finite] * MS
    slos = slo_targets(run.scenario, metric)
    series = []
    if len(values):
        pool_codes, pool_names = _groups(run.done["pool"])
        for i, pool in enumerate(run.pools):
            v = values[(pool_codes == (pool_names.index(pool) if pool in pool_names else -2))
                       [finite]]
            if len(v) > 1:
                series.append(_series(f"pool {pool}", *_ccdf(v), kind="step", colour=i,
                                      digits=8))
        if len(run.teams) > 1:
            team_codes, team_names = _groups(run.done["team"])
            for i, team in enumerate(run.teams):
                v = values[(team_codes == team_names.index(team))[finite]] \
                    if team in team_names else np.zeros(0)
                if len(v) > 1:
                    series.append(_series(f"team {team}", *_ccdf(v), kind="step",
                                          colour=len(run.pools) + i, dash=True, digits=8))
    rules = [_rule("x", t * MS, f"SLO {metric.upper()} {stat} {ms_label(t * MS)} ms")
             for stat, t in slos]
    rules += [_rule("y", SHARE_ABOVE[stat], f"{stat}: {SHARE_ABOVE[stat]:g} slower")
              for stat, _ in slos if stat in SHARE_ABOVE]
    positive = values[values > 0]
    log_x = bool(len(positive) and np.log10(positive.max() / positive.min()) > LOG_DECADES)
    targets_ms = [t * MS for _, t in slos]
    if log_x:
        lo, hi = float(positive.min()), float(positive.max())
        if targets_ms:
            lo, hi = min(lo, min(targets_ms) / 1.2), max(hi, max(targets_ms) * 1.2)
        x_range = (lo, hi)
    else:
        top = max([float(values.max()) if len(values) else 1.0, *targets_ms])
        x_range = (0.0, top * 1.05)
    floor = min(0.5 / len(values), 0.01) if len(values) else 0.01
    return {"name": f"{metric}_ccdf", "title": run.title(f"{what}, share of requests slower"),
            "alt": f"share of requests slower than each {what}",
            "x": _axis(f"{what} (ms)", log=log_x, range_=x_range),
            "panels": [{"y": _axis("share of completed requests slower", log=True,
                                   range_=(floor, 1.0)),
                        "series": series, "rules": rules}],
            "note": None if series else "no completed requests"}


def _bin_quantiles(bins: np.ndarray, values: np.ndarray,
                   qs: tuple[float, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per bin (integer labels) of the finite ``values``: the bins present and, for each
    of ``qs``, each bin's quantile (linear between order statistics, as numpy's and
    pandas' default)."""
    keep = np.isfinite(values)
    bins, values = bins[keep], values[keep]
    if len(values) == 0:
        return np.zeros(0), [np.zeros(0) for _ in qs]
    order = np.lexsort((values, bins))
    bins, values = bins[order], values[order]
    labels, start, count = np.unique(bins, return_index=True, return_counts=True)
    out = []
    for q in qs:
        pos = start + q * (count - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.ceil(pos).astype(np.int64)
        out.append(values[lo] + (pos - lo) * (values[hi] - values[lo]))
    return labels, out


def _bin_width_s(run: RunData) -> float:
    arrivals = np.asarray(run.req["arrival_s"], dtype=np.float64)
    span = float(arrivals.max()) if len(arrivals) else 0.0
    return max(float(getattr(run.scenario, "sample_interval", 1.0)), span / TIME_BINS)


def latency_over_time_chart(run: RunData) -> dict:
    """TTFT and TPOT p50 and p99 of the requests arriving in each time bin, against the
    fleet-wide SLO targets; below, the share of requests within every SLO (when set)."""
    width = _bin_width_s(run)
    arrivals = np.asarray(run.req["arrival_s"], dtype=np.float64)
    slo = run.scenario.slos
    panels = []
    done_bins = np.floor(np.asarray(run.done["arrival_s"], dtype=np.float64) / width) \
        if len(run.done) else np.zeros(0)
    for metric, colour in (("ttft", 0), ("tpot", 1)):
        series = []
        values = np.asarray(run.done[f"{metric}_s"], dtype=np.float64) if len(run.done) \
            else np.zeros(0)
        labels, both = _bin_quantiles(done_bins, values, (0.5, 0.99))
        for (q, dash), got in zip(((50, False), (99, True)), both):
            if len(labels):
                series.append(_series(f"{metric.upper()} p{q}", labels * width, got * MS,
                                      colour=colour, dash=dash, digits=4))
        rules = [_rule("y", t * MS, f"SLO {metric.upper()} {stat} {ms_label(t * MS)} ms")
                 for stat, t in slo_targets(run.scenario, metric) if stat != "mean"]
        panels.append({"y": _axis(f"{metric.upper()} (ms)", range_=None), "series": series,
                       "rules": rules, "from_zero": True})
    fleet = targets(slo)
    if fleet and len(run.req):
        # the requests SLOs judge (all but policy refusals), as sim.output.slo.judged
        judged = ~np.asarray(run.req["reject_reason"].isin(POLICY_REFUSALS))
        done = _rows_of(run.req["status"], "completed")[judged]
        latencies = {f"{m}_s": np.asarray(run.req[f"{m}_s"])[judged][done]
                     for m in SLO_LATENCIES}
        ok = np.zeros(int(judged.sum()), dtype=bool)
        ok[done] = within_every_bound(Table(latencies), fleet)
        bins = np.floor(np.asarray(run.req["arrival_s"], dtype=np.float64)[judged] / width)
        labels, inverse = np.unique(bins, return_inverse=True)
        share = np.bincount(inverse, weights=ok, minlength=len(labels)) / \
            np.bincount(inverse, minlength=len(labels))
        rules = [] if slo.attainment is None else \
            [_rule("y", slo.attainment * 100.0, f"SLO attainment {slo.attainment * 100:g}%")]
        panels.append({"y": _axis("within every SLO (%)", range_=(0.0, 102.0)),
                       "series": [_series("within every SLO", labels * width, share * 100.0,
                                          colour=2, digits=3)],
                       "rules": rules})
    span = float(arrivals.max()) if len(arrivals) else 0.0
    return {"name": "latency_over_time",
            "title": run.title("latency and SLO attainment over time"),
            "alt": "latency percentiles and SLO attainment over time",
            "x": time_axis(span, "arrival time"), "panels": panels,
            "note": None if len(run.done) else "no completed requests"}


def length_bins(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """Edges for a histogram of token counts: log-spaced when they span more than two
    decades, else even."""
    lo, hi = max(float(values.min()), 1.0), max(float(values.max()), 1.0)
    if hi / lo > 100.0:
        return np.geomspace(lo, hi * 1.0001, LENGTH_BINS + 1), True
    return np.linspace(lo - 0.5, hi + 0.5, min(LENGTH_BINS, int(hi - lo) + 1) + 1), False


def lengths_charts(run: RunData) -> list[dict]:
    """Histograms of the prompt lengths of the requests that arrived and the output
    lengths of those completed, each with its mean."""
    charts = []
    for frame, column, what in ((run.req, "prompt_tokens", "prompt"),
                                (run.done, "output_tokens", "output")):
        values = np.asarray(frame[column], dtype=np.float64) if len(frame) else np.zeros(0)
        series, rules, log = [], [], False
        x_range = None
        if len(values):
            edges, log = length_bins(values)
            counts, _ = np.histogram(values, bins=edges)
            # a step after each left edge, and the last edge closing the last bin
            series = [_series("requests", edges, np.append(counts, counts[-1]), kind="step",
                              fill=True, digits=0)]
            mean = float(values.mean())
            rules = [_rule("x", mean, f"mean {mean:,.0f} tokens")]
            x_range = (float(edges[0]), float(edges[-1]))
        charts.append({"name": f"{what}_lengths",
                       "title": run.title(f"{what} lengths"),
                       "alt": f"histogram of {what} lengths",
                       "x": _axis(f"{what} tokens", log=log, range_=x_range),
                       "panels": [{"y": _axis("requests"), "series": series, "rules": rules,
                                   "from_zero": True}],
                       "note": None if series else "no requests"})
    return charts


def _downsampled(t: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`MAX_TIME_POINTS` points: the mean of each run of consecutive
    samples (their first time) when there are more."""
    n = len(t)
    if n <= MAX_TIME_POINTS:
        return t, values
    per = int(np.ceil(n / MAX_TIME_POINTS))
    starts = np.arange(0, n, per)
    sums = np.add.reduceat(values, starts)
    counts = np.diff(np.append(starts, n))
    return t[starts], sums / counts


def timeseries_chart(run: RunData, name: str, what: str,
                     panels: list[tuple[str, str, float, tuple | None]]) -> dict:
    """One panel per ``(column, y label, scale, y range)`` of the time series, one line per
    pool."""
    ts = run.ts
    have = len(ts) > 0 and "time_s" in ts.columns and \
        all(c in ts.columns for c, _, _, _ in panels)
    out = []
    pool_codes, pool_names = _groups(ts["pool"]) if have else (np.zeros(0), [])
    for column, label, scale, y_range in panels:
        series = []
        for i, pool in enumerate(run.pools):
            if pool not in pool_names:
                continue
            rows = pool_codes == pool_names.index(pool)
            t, v = _downsampled(np.asarray(ts["time_s"], np.float64)[rows],
                                np.asarray(ts[column], np.float64)[rows] * scale)
            series.append(_series(f"pool {pool}", t, v, colour=i, digits=4))
        out.append({"y": _axis(label, range_=y_range), "series": series, "rules": [],
                    "from_zero": True})
    span = float(np.max(np.asarray(ts["time_s"], np.float64))) if have else 0.0
    return {"name": name, "title": run.title(what), "alt": what, "x": time_axis(span),
            "panels": out, "note": None if have else "no samples"}


def replicas_chart(run: RunData) -> dict:
    """Replicas (billed and ready) per pool over time; arrivals per second beside the
    first, on a second y axis."""
    chart = timeseries_chart(run, "replicas", "replicas against arrivals",
                             [("replicas", "replicas (billed)", 1.0, None),
                              ("ready", "replicas ready", 1.0, None)])
    arrivals = np.asarray(run.req["arrival_s"], dtype=np.float64)
    if len(arrivals):
        interval = float(getattr(run.scenario, "sample_interval", 1.0))
        last = float(arrivals.max())
        bins = int(min(MAX_TIME_POINTS, np.floor(last / interval) + 1))
        width = max(interval, last / bins)         # the bins reach the last arrival
        edges = np.arange(bins + 1) * width
        counts, _ = np.histogram(arrivals, bins=edges)
        chart["panels"][0]["series"].append(
            _series("arrivals per s", edges[:-1], counts / width, colour=-1, axis=1,
                    kind="step", digits=4))
        chart["panels"][0]["y2"] = _axis("arrivals per s")
    return chart


def teams_chart(run: RunData) -> dict:
    """Per team: TTFT p50 and p99 of completed requests (with the TTFT SLO), the cost,
    and the rejections by reason."""
    teams = run.teams
    x = np.arange(len(teams), dtype=np.float64)
    axis = {"label": "team", "log": False, "format": "category", "categories": teams,
            "range": [-0.5, len(teams) - 0.5]}
    top, middle, bottom = [], [], []
    if teams:
        codes, names = _groups(run.done["team"]) if len(run.done) else (np.zeros(0), [])
        ttft = np.asarray(run.done["ttft_s"], dtype=np.float64) if len(run.done) else \
            np.zeros(0)
        for q, align, colour in ((50, -1, 0), (99, 1, 1)):
            got = []
            for team in teams:
                v = ttft[codes == names.index(team)] if team in names else np.zeros(0)
                v = v[np.isfinite(v)]
                got.append(float(np.quantile(v, q / 100.0)) * MS if len(v) else 0.0)
            top.append(_series(f"TTFT p{q}", x, got, kind="bars", colour=colour,
                               align=align, digits=3))
        cost = run.summary.get("teams", {})
        middle.append(_series("cost (USD)", x, [cost.get(t, {}).get("cost_usd", 0.0)
                                                for t in teams], kind="bars", colour=2,
                              digits=4))
        rejected = run.req[_rows_of(run.req["status"], "rejected")]
        if len(rejected):
            t_codes, t_names = _groups(rejected["team"])
            r_codes, r_names = _groups(rejected["reject_reason"])
            counts = {}
            for ri, reason in sorted(enumerate(r_names), key=lambda p: p[1]):
                mine = r_codes == ri
                if mine.any():
                    counts[reason] = np.array([int((mine & (t_codes == t_names.index(t))).sum())
                                               if t in t_names else 0 for t in teams], float)
            # stacked: each bar drawn to the sum of its reason and those before it, the
            # tallest first; the legend shows each reason's own count
            total = np.zeros(len(teams))
            stacks = []
            for i, (reason, own) in enumerate(counts.items()):
                total = total + own
                stacks.append(_series(reason, x, total, kind="bars", colour=3 + i,
                                      own=_list(own, 0), digits=0))
            bottom = stacks[::-1]
    rules = [_rule("y", t * MS, f"SLO TTFT {stat} {ms_label(t * MS)} ms")
             for stat, t in slo_targets(run.scenario, "ttft") if stat in ("p50", "p99")]
    return {"name": "teams", "title": run.title("per team: TTFT, cost, rejections"),
            "alt": "per team: TTFT, cost and rejections", "x": axis,
            "panels": [{"y": _axis("time to first token (ms)"), "series": top,
                        "rules": rules, "from_zero": True},
                       {"y": _axis("cost (USD)"), "series": middle, "rules": [],
                        "from_zero": True},
                       {"y": _axis("rejected requests"), "series": bottom, "rules": [],
                        "from_zero": True, "note": None if bottom else "no rejections"}],
            "note": None if teams else "no requests"}


def run_charts(results) -> dict[str, list[dict]]:
    """Every chart of the run's page, by the page's section."""
    run = RunData(results)
    return {
        "latency": [ccdf_chart(run, metric, what) for metric, what in LATENCIES],
        "over_time": [latency_over_time_chart(run)],
        "lengths": lengths_charts(run),
        "load": [replicas_chart(run),
                 timeseries_chart(run, "throughput", "throughput and cost",
                                  [("tokens_per_s", "tokens per s", 1.0, None),
                                   ("cost_usd_per_h", "cost (USD per hour)", 1.0, None)]),
                 timeseries_chart(run, "queue", "queued and running requests",
                                  [("queued", "queued requests", 1.0, None),
                                   ("running", "running sequences", 1.0, None)]),
                 timeseries_chart(run, "kv_util", "KV cache use and GPU busy time",
                                  [("kv_util", "KV cache used (%)", 100.0, (0.0, 102.0)),
                                   ("busy_frac", "GPU busy (%)", 100.0, (0.0, 102.0))])],
        "teams": [teams_chart(run)],
    }
