"""The run report's charts of the requests themselves: histograms of prompt and output
lengths, and per team TTFT, cost and rejections."""
from __future__ import annotations

import numpy as np

from sim.output.pages.chart_spec import (MS, RunData, axis_spec, codes_and_names, json_list,
                                    ms_label, rows_named, rule_spec, series_spec,
                                    slo_targets)

LENGTH_BINS = 40


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
            series = [series_spec("requests", edges, np.append(counts, counts[-1]), kind="step",
                              fill=True, digits=0)]
            mean = float(values.mean())
            rules = [rule_spec("x", mean, f"mean {mean:,.0f} tokens")]
            x_range = (float(edges[0]), float(edges[-1]))
        charts.append({"name": f"{what}_lengths",
                       "title": run.title(f"{what} lengths"),
                       "alt": f"histogram of {what} lengths",
                       "x": axis_spec(f"{what} tokens", log=log, range_=x_range),
                       "panels": [{"y": axis_spec("requests"), "series": series, "rules": rules,
                                   "from_zero": True}],
                       "note": None if series else "no requests"})
    return charts


def teams_chart(run: RunData) -> dict:
    """Per team: TTFT p50 and p99 of completed requests (with the TTFT SLO), the cost,
    and the rejections by reason."""
    teams = run.teams
    x = np.arange(len(teams), dtype=np.float64)
    axis = {"label": "team", "log": False, "format": "category", "categories": teams,
            "range": [-0.5, len(teams) - 0.5]}
    top, middle, bottom = [], [], []
    if teams:
        codes, names = codes_and_names(run.done["team"]) if len(run.done) else (np.zeros(0), [])
        ttft = np.asarray(run.done["ttft_s"], dtype=np.float64) if len(run.done) else \
            np.zeros(0)
        for q, align, colour in ((50, -1, 0), (99, 1, 1)):
            got = []
            for team in teams:
                v = ttft[codes == names.index(team)] if team in names else np.zeros(0)
                v = v[np.isfinite(v)]
                got.append(float(np.quantile(v, q / 100.0)) * MS if len(v) else 0.0)
            top.append(series_spec(f"TTFT p{q}", x, got, kind="bars", colour=colour,
                               align=align, digits=3))
        cost = run.summary.get("teams", {})
        middle.append(series_spec("cost (USD)", x, [cost.get(t, {}).get("cost_usd", 0.0)
                                                for t in teams], kind="bars", colour=2,
                              digits=4))
        rejected = run.req[rows_named(run.req["status"], "rejected")]
        if len(rejected):
            t_codes, t_names = codes_and_names(rejected["team"])
            r_codes, r_names = codes_and_names(rejected["reject_reason"])
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
                stacks.append(series_spec(reason, x, total, kind="bars", colour=3 + i,
                                      own=json_list(own, 0), digits=0))
            bottom = stacks[::-1]
    rules = [rule_spec("y", t * MS, f"SLO TTFT {stat} {ms_label(t * MS)} ms")
             for stat, t in slo_targets(run.scenario, "ttft") if stat in ("p50", "p99")]
    return {"name": "teams", "title": run.title("per team: TTFT, cost, rejections"),
            "alt": "per team: TTFT, cost and rejections", "x": axis,
            "panels": [{"y": axis_spec("time to first token (ms)"), "series": top,
                        "rules": rules, "from_zero": True},
                       {"y": axis_spec("cost (USD)"), "series": middle, "rules": [],
                        "from_zero": True},
                       {"y": axis_spec("rejected requests"), "series": bottom, "rules": [],
                        "from_zero": True, "note": None if bottom else "no rejections"}],
            "note": None if teams else "no requests"}

