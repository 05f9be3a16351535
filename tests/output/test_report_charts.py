"""The report answers a planner's questions: every chart is titled with the scenario, its
tick labels are plain text (no mathtext), each SLO target is drawn on the latency charts
that can show it, the tail of TTFT and TPOT is readable (share slower, log scale), GPU busy
time is drawn beside KV use, time past an hour reads hh:mm, a sweep is drawn against the
field it varied, and the tables carry no scientific notation and give each team's cost per
hour and per day."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

import sim
from sim.config.scenario import Scenario
from sim.output.pages import plots, plots_requests
from sim.output.pages.report import build_report
from sim.output.pages.sweep_report import build_sweep_report, sweep_figure

SLOS = {"ttft_p99": "2s", "tpot_p99": "50ms", "e2e_p95": "20s"}


def _scenario(name: str, duration: float, rate: float, slos=None) -> Scenario:
    return Scenario.model_validate({
        "name": name, "duration": duration, "seed": 5, "sample_interval": 2,
        "workload": {"streams": {
            "a": {"team": "alpha", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": rate},
                  "prompt_tokens": {"type": "lognormal", "mean": 800, "cv": 1.0},
                  "output_tokens": {"type": "lognormal", "mean": 100, "cv": 1.0}},
            "b": {"team": "beta", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": rate / 2},
                  "prompt_tokens": 300, "output_tokens": 40}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
        **({"slos": slos} if slos else {})})


@pytest.fixture(scope="module")
def results():
    return sim.run(_scenario("charts-run", 40, 10.0, SLOS))


@pytest.fixture(scope="module")
def long_results():
    """Two simulated hours of light traffic."""
    return sim.run(_scenario("long-run", 7200, 0.05))


def _drawn(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def _tick_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes
            for t in (*ax.get_xticklabels(), *ax.get_yticklabels()) if t.get_text()]


def _sweep_table(varied: dict[str, list]) -> pd.DataFrame:
    """A sweep table of the shape `fleetsim sweep` writes (the varied columns first)."""
    rows = []
    keys = list(varied)
    for i, values in enumerate(zip(*varied.values())):
        rows.append({**dict(zip(keys, values)), "arrived": 100,
                     "requests_per_s": 10.0 + i, "output_tokens_per_s": 12_345.678 * (i + 1),
                     "ttft_p50_s": 0.2 * (i + 1), "ttft_p99_s": 0.9 * (i + 1) ** 2,
                     "tpot_p50_s": 0.01, "tpot_p99_s": 0.02 * (i + 1), "rejected": 0,
                     "cost_usd": 23_456.789})
    return pd.DataFrame(rows)


def test_every_png_is_titled_with_the_scenario_name(results):
    for name, make in plots.FIGURES.items():
        fig = make(results)
        assert fig.get_suptitle().startswith("charts-run: "), name


def test_no_tick_label_is_mathtext(results):
    """A log axis's default labels are mathtext, shown raw (``$\\mathdefault{10^{0}}$``)
    under plain text: the sweep's latency axis and the CDFs' share axis are log scales."""
    figures = {name: _drawn(make(results)) for name, make in plots.FIGURES.items()}
    table = _sweep_table({"workload.rate_scale": [1.0, 2.0, 4.0]})
    figures["sweep"] = _drawn(sweep_figure(table))
    assert figures["sweep"].axes[0].get_yscale() == "log"
    for name, fig in figures.items():
        labels = _tick_labels(fig)
        assert labels, name
        assert not [t for t in labels if "$" in t or "mathdefault" in t], name


def test_ttft_and_tpot_tails_are_drawn_as_the_share_slower_on_a_log_axis(results):
    """The y axis is the share of requests slower than x, log scale down past 1%: p99 is
    where a curve crosses 0.01, as far from the top as p90 from p50."""
    for make in (plots.ttft_cdf_figure, plots.tpot_cdf_figure):
        ax = make(results).axes[0]
        assert ax.get_yscale() == "log"
        assert ax.get_ylim()[0] <= 0.01
        assert max(max(line.get_ydata()) for line in ax.lines if line.get_label()
                   .startswith("pool")) <= 1.0


def _vertical_at(ax, x: float) -> bool:
    return any(len(set(line.get_xdata())) == 1 and line.get_xdata()[0] == pytest.approx(x)
               and line.get_label().startswith("SLO") for line in ax.lines)


def test_each_slo_target_is_drawn_on_its_latency_chart_within_the_axis(results,
                                                                      long_results):
    """TTFT 2 s, TPOT 50 ms and E2E p95 20 s, each a dotted line on its chart, inside the
    x axis even where every request was faster; none where no SLO is declared."""
    for make, target_ms in ((plots.ttft_cdf_figure, 2000.0), (plots.tpot_cdf_figure, 50.0),
                            (plots.e2e_cdf_figure, 20_000.0)):
        ax = make(results).axes[0]
        assert _vertical_at(ax, target_ms), make.__name__
        lo, hi = ax.get_xlim()
        assert lo <= target_ms <= hi, make.__name__
    top = plots.teams_figure(results).axes[0]
    assert any(line.get_label() == "SLO TTFT p99" and line.get_ydata()[0] == 2000.0
               for line in top.lines)
    ax = plots.ttft_cdf_figure(long_results).axes[0]
    assert not [line for line in ax.lines if line.get_label().startswith("SLO")]


def test_sweep_curves_carry_the_slo_lines_and_the_scenario_name(results):
    table = _sweep_table({"workload.rate_scale": [1.0, 2.0, 4.0]})
    fig = sweep_figure(table, slos=results.scenario.slos, name="charts-run")
    ttft, tpot = fig.axes[:2]
    assert any(line.get_label().startswith("SLO TTFT P99") and line.get_ydata()[0] == 2000.0
               for line in ttft.lines)
    assert any(line.get_label().startswith("SLO TPOT P99") and line.get_ydata()[0] == 50.0
               for line in tpot.lines)
    assert fig.get_suptitle().startswith("charts-run: ")


def test_a_sweep_of_load_is_drawn_against_throughput_any_other_against_its_field():
    load = sweep_figure(_sweep_table({"workload.rate_scale": [1.0, 2.0, 4.0]}))
    assert load.axes[0].get_xlabel() == "output tokens per s"
    replicas = _sweep_table({"pools.p.replicas": [1, 2, 4]})
    ax = sweep_figure(replicas).axes[0]
    assert ax.get_xlabel() == "pools.p.replicas"
    assert list(ax.lines[0].get_xdata()) == [1, 2, 4]
    page = build_sweep_report(replicas, "charts-run")
    assert "Sweep: latency against pools.p.replicas" in page


def test_gpu_busy_time_is_drawn_beside_kv_use(results):
    fig = plots.kv_util_figure(results)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["KV cache used (%)", "GPU busy (%)"]
    ts = results.timeseries
    line = fig.axes[1].lines[0]
    np.testing.assert_allclose(line.get_ydata(), ts["busy_frac"].to_numpy() * 100.0)


def test_time_axes_read_hh_mm_past_an_hour(long_results, results):
    for make in (plots.queue_figure, plots.kv_util_figure, plots.replicas_figure,
                 plots.throughput_figure, plots_requests.latency_over_time_figure):
        fig = _drawn(make(long_results))
        bottom = [ax for ax in fig.axes if ax.get_xlabel()][-1]
        lo, hi = bottom.get_xlim()
        labels = [t.get_text() for t in bottom.get_xticklabels()
                  if t.get_text() and lo <= t.get_position()[0] <= hi]
        assert labels and all(re.fullmatch(r"\d\d:\d\d", t) for t in labels), (make, labels)
        assert "01:00" in labels and "hh:mm" in bottom.get_xlabel()
    short = _drawn(plots.queue_figure(results)).axes[-1]
    assert short.get_xlabel() == "simulated time (s)"


def _cells(page: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", page)


def test_report_tables_have_no_scientific_notation(results):
    """12,345.678 tokens/s is ``12,346``, a small figure keeps three significant digits
    written out; no cell of the run's or the sweep's tables reads ``1.235e+04``."""
    page = build_report(results, _sweep_table({"workload.rate_scale": [1.0, 2.0, 4.0]}))
    cells = _cells(page)
    assert "12,346" in cells and "23,457" in cells
    assert not [c for c in cells if re.search(r"\de[+-]?\d", c)]
    from sim.output.table import plain_number
    assert [plain_number(v) for v in (12_345.678, 123.456, 1.5, 0.0123456, 0.000012)] == \
        ["12,346", "123", "1.50", "0.0123", "0.000012"]


def test_report_gives_each_teams_cost_per_hour_and_per_day(results):
    page = build_report(results)
    s = results.summary
    assert "<th>USD per hour</th><th>USD per day</th>" in page
    hours = s["end_s"] / 3600.0
    from sim.output.table import plain_number
    for team in s["teams"].values():
        assert plain_number(team["cost_usd"] / hours * 24.0) in _cells(page)


def test_pareto_views_are_titled_with_the_scenario_name():
    from sim.output.pages import pareto
    table = pd.DataFrame({"tokens_per_s_per_user": [10.0, 20.0], "output_tokens_per_s_per_gpu":
                          [900.0, 500.0], "slo_margin_min": [0.1, 0.3],
                          "cost_usd_per_h": [12.0, 30.0]})
    fig = pareto.pareto_figure(table, ["a", "b"], "charts-run")
    assert fig.get_suptitle().startswith("charts-run: ")


# the run report's charts, drawn by the browser from a spec built here (sim.output.pages.chart_data)

def _charts(results) -> dict[str, dict]:
    from sim.output.pages.chart_data import run_charts
    return {c["name"]: c for part in run_charts(results).values() for c in part}


def _texts(value, key=None):
    """Every text of a chart spec a reader sees (labels, titles, formats, category names),
    with the key it is under."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v, key)
    elif isinstance(value, str):
        yield key, value


RUN_CHARTS = ["ttft_ccdf", "tpot_ccdf", "e2e_ccdf", "latency_over_time", "prompt_lengths",
              "output_lengths", "replicas", "throughput", "queue", "kv_util", "teams"]
TIME_CHARTS = ["latency_over_time", "replicas", "throughput", "queue", "kv_util"]


def test_the_report_draws_every_chart_titled_with_the_scenario(results):
    charts = _charts(results)
    assert list(charts) == RUN_CHARTS
    assert all(c["title"].startswith("charts-run: ") for c in charts.values())


def test_no_chart_text_is_mathtext_or_scientific(results, long_results):
    """No label, title or tick format holds "$" (mathtext) or an exponent (``1e+03``):
    every tick is a plain number, hh:mm or a name."""
    for run in (results, long_results):
        texts = [(k, t) for c in _charts(run).values() for k, t in _texts(c)]
        assert texts
        assert not [t for _, t in texts if "$" in t or re.search(r"\de[+-]?\d", t)]
        formats = {t for k, t in texts if k == "format"}
        assert formats <= {"number", "hhmm", "category"}


def test_latency_tails_are_shares_slower_on_log_axes_with_the_slo_in_ms(results):
    """TTFT, TPOT and E2E: the share of requests slower than x (ms) on a log y axis
    reaching below 1%, each fleet-wide SLO target a rule at its value in ms inside the
    x axis (2 s is 2,000 ms), and the share it allows (p99: 0.01) a rule too."""
    charts = _charts(results)
    for name, target_ms, share in (("ttft_ccdf", 2000.0, 0.01), ("tpot_ccdf", 50.0, 0.01),
                                   ("e2e_ccdf", 20_000.0, 0.05)):
        chart = charts[name]
        panel, = chart["panels"]
        assert panel["y"]["log"] and panel["y"]["range"][0] <= 0.01, name
        assert panel["y"]["range"][1] == 1.0
        assert "(ms)" in chart["x"]["label"]
        xs = [r["value"] for r in panel["rules"] if r["axis"] == "x"]
        assert xs == [target_ms], name
        lo, hi = chart["x"]["range"]
        assert lo <= target_ms <= hi, name
        assert [r["value"] for r in panel["rules"] if r["axis"] == "y"] == [share]
        pools = [s for s in panel["series"] if s["label"] == "pool p"]
        assert pools and max(pools[0]["y"]) <= 1.0 and min(pools[0]["y"]) > 0.0
    over_time = charts["latency_over_time"]["panels"]
    assert [r["value"] for r in over_time[0]["rules"]] == [2000.0]
    assert [r["value"] for r in over_time[1]["rules"]] == [50.0]
    teams = charts["teams"]["panels"][0]
    assert [r["value"] for r in teams["rules"]] == [2000.0]


def test_no_slo_rule_where_no_slo_is_declared(long_results):
    charts = _charts(long_results)
    rules = [r["label"] for c in charts.values() for p in c["panels"] for r in p["rules"]]
    assert not [label for label in rules if label.startswith("SLO")]


def test_share_slower_curves_follow_the_data(results):
    """The pool's curve at each drawn latency is the share of its completed requests
    slower than it."""
    import numpy as np
    done = results.requests[results.requests["status"].astype(str) == "completed"]
    ttft_ms = np.sort(done["ttft_s"].to_numpy()) * 1e3
    series = _charts(results)["ttft_ccdf"]["panels"][0]["series"][0]
    for x, share in list(zip(series["x"], series["y"]))[::50]:
        assert share == pytest.approx((ttft_ms > x + 1e-6).mean(), abs=1e-6)


def test_browser_charts_time_axes_read_hh_mm_past_an_hour(results, long_results):
    for name in TIME_CHARTS:
        axis = _charts(long_results)[name]["x"]
        assert axis["format"] == "hhmm" and "hh:mm" in axis["label"], name
        assert 3600 % axis["step_s"] == 0 and axis["range"][1] > 3600.0
        short = _charts(results)[name]["x"]
        assert short["format"] == "number" and short["label"].endswith("(s)"), name


def test_browser_charts_draw_gpu_busy_beside_kv_use(results):
    import numpy as np
    panels = _charts(results)["kv_util"]["panels"]
    assert [p["y"]["label"] for p in panels] == ["KV cache used (%)", "GPU busy (%)"]
    ts = results.timeseries
    np.testing.assert_allclose(panels[1]["series"][0]["y"], ts["busy_frac"] * 100.0,
                               atol=1e-4)


def _tiled(results, times: int):
    """``results`` with its requests and samples repeated ``times`` times, one after
    another in time: a long, busy run without simulating it."""
    import dataclasses

    import numpy as np
    from sim.output.columns import Coded, Table
    from sim.output.results import RunTables

    def tile(table, shift_columns, span_s):
        out = {}
        offsets = np.repeat(np.arange(times) * span_s, len(table))
        for name in table.columns:
            col = table[name]
            if isinstance(col, Coded):
                out[name] = Coded(np.tile(col.codes, times), col.names)
            else:
                out[name] = np.tile(col, times)
                if name in shift_columns:
                    out[name] = out[name] + offsets
        return Table(out)

    span = float(results.summary["end_s"])
    req = tile(results.tables.requests, {"arrival_s", "admitted_s", "first_token_s",
                                         "finish_s"}, span)
    ts = tile(results.tables.timeseries, {"time_s"}, span)
    return dataclasses.replace(results, tables=RunTables(req, ts))


def test_a_long_runs_chart_data_stays_small(results):
    """A day of a busy fleet (here the run's 40 s repeated to about a million requests)
    is drawn through a bounded number of points: a share-slower curve through at most
    CCDF_POINTS, a series over time at most MAX_TIME_POINTS; the page's data a few MB."""
    from sim.output.pages import chart_data
    from sim.output.pages.latency_charts import CCDF_POINTS
    from sim.output.pages.load_charts import MAX_TIME_POINTS
    from sim.output.pages.report import charts_json

    times = 1_000_000 // len(results.tables.requests) + 1
    big = _tiled(results, times)
    assert len(big.tables.requests) >= 1_000_000
    charts = chart_data.run_charts(big)
    flat = {c["name"]: c for part in charts.values() for c in part}
    for name, chart in flat.items():
        limit = CCDF_POINTS if name.endswith("_ccdf") else MAX_TIME_POINTS
        for panel in chart["panels"]:
            for series in panel["series"]:
                assert len(series["x"]) == len(series["y"]) <= limit, (name, series["label"])
    assert flat["latency_over_time"]["x"]["format"] == "hhmm"
    assert len(charts_json(charts)) < 2_000_000


def test_a_default_run_imports_neither_matplotlib_nor_pandas(tmp_path):
    """Writing a run's report costs no plotting library: ``fleetsim run`` (report.html
    and all) imports neither matplotlib nor pandas; ``--png`` draws with matplotlib."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sim", "run",
                           "scenarios/v1-single.yaml", "--out", str(tmp_path / "out"),
                           "--quiet"], capture_output=True, text=True, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "sim.output.pages.report" in imported and (tmp_path / "out" / "report.html").is_file()
    assert not {m for m in imported if m.split(".")[0] in ("matplotlib", "pandas")}
    assert not (tmp_path / "out" / "plots").exists()


def test_report_inlines_the_chart_library_and_fetches_nothing(results):
    """The page carries uPlot (its licence with it), the charts' code and data: no script
    or style is fetched; the only address in it is uPlot's home, in its licence banner."""
    from sim.output.pages.report import STATIC, UPLOT_VERSION
    page = build_report(results)
    library = (STATIC / "uPlot.iife.min.js").read_text(encoding="utf-8")
    assert library in page and (STATIC / "uPlot.min.css").read_text() in page
    assert f"uPlot {UPLOT_VERSION}, under its licence" in page
    assert "Permission is hereby granted, free of charge" in page
    assert f"(v{UPLOT_VERSION})" in library
    tags = re.findall(r"<(script|link|img|iframe)\b[^>]*>", page)
    assert tags == ["script"] * 3
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert re.findall(r"https?://[^\s\"')]*", page) == ["https://github.com/leeoniya/uPlot"]


def test_latency_over_time_is_each_bins_percentiles_and_attainment(results):
    """The page's latency over time holds the figures the PNG draws (pandas' per-bin
    quantiles and attainment, sim.output.pages.plots_requests), computed with numpy alone."""
    import numpy as np
    panels = _charts(results)["latency_over_time"]["panels"]
    table = plots_requests.percentiles_over_time(results)
    for panel, metric in zip(panels, ("TTFT", "TPOT")):
        for series in panel["series"]:
            np.testing.assert_allclose(series["x"], table["time_s"], atol=1e-6)
            np.testing.assert_allclose(series["y"], table[series["label"]] * 1e3, atol=1e-4)
    attained = plots_requests.attainment_over_time(results)
    share = panels[2]["series"][0]
    np.testing.assert_allclose(share["x"], attained["time_s"], atol=1e-6)
    np.testing.assert_allclose(share["y"], attained["attainment"] * 100.0, atol=1e-3)


def test_charts_of_a_run_with_no_requests_say_so(results):
    """No request and no sample: every chart is there, with a note instead of data."""
    import dataclasses

    import numpy as np
    from sim.output.columns import Table
    from sim.output.results import RunTables
    requests = results.tables.requests
    none = RunTables(requests[np.zeros(len(requests), dtype=bool)], Table({}))
    charts = _charts(dataclasses.replace(results, tables=none, summary={}))
    assert list(charts) == RUN_CHARTS
    assert all(c["note"] for c in charts.values())
    assert not [s for c in charts.values() for p in c["panels"] for s in p["series"]]
