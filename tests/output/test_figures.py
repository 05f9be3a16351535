"""The report's figures hold the numbers they claim: latency percentiles and SLO
attainment per time bin, length histograms, the sampled CDFs, per-team cost, the Pareto
fronts, and the price's source in the provenance."""
from __future__ import annotations

import numpy as np
import pytest

import sim
from sim.config.scenario import Scenario
from sim.output.pages import pareto, plots, plots_requests
from sim.output.pages.report import _provenance


@pytest.fixture(scope="module")
def results():
    scn = Scenario.model_validate({
        "name": "figures", "duration": 60, "seed": 3, "sample_interval": 1,
        "workload": {"streams": {
            "a": {"team": "alpha", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": 12},
                  "prompt_tokens": {"type": "lognormal", "mean": 800, "cv": 1.5},
                  "output_tokens": {"type": "lognormal", "mean": 120, "cv": 1.0}},
            "b": {"team": "beta", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": 4},
                  "prompt_tokens": 300, "output_tokens": 40}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}},
        "slos": {"ttft_p99": "150ms", "tpot_p99": "20ms", "attainment": 0.9},
    })
    return sim.run(scn)


def test_percentiles_over_time_are_each_bins_own(results):
    table = plots_requests.percentiles_over_time(results)
    width = plots_requests.bin_width_s(results)
    assert width == 1.0      # 60 s of arrivals over 60 bins, at least the 1 s interval
    req = results.requests
    done = req[req["status"].astype(str) == "completed"]
    for _, row in table.iloc[[0, len(table) // 2, -1]].iterrows():
        mine = done[(done["arrival_s"] >= row["time_s"]) & (done["arrival_s"] < row["time_s"] + width)]
        assert row["TTFT p99"] == pytest.approx(np.percentile(mine["ttft_s"], 99))
        assert row["TPOT p50"] == pytest.approx(np.nanpercentile(mine["tpot_s"], 50))


def test_attainment_over_time_counts_requests_within_every_bound(results):
    table = plots_requests.attainment_over_time(results)
    req = results.requests
    first = req[req["arrival_s"] < 1.0]
    ok = ((first["status"].astype(str) == "completed") & ~(first["ttft_s"] > 0.150)
          & ~(first["tpot_s"] > 0.020))
    assert table["attainment"].iloc[0] == pytest.approx(ok.mean())
    assert ((table["attainment"] >= 0) & (table["attainment"] <= 1)).all()


def test_no_fleet_slo_no_attainment_panel(results):
    import dataclasses
    bare = dataclasses.replace(results, scenario=results.scenario.model_copy(
        update={"slos": type(results.scenario.slos)()}))
    assert plots_requests.attainment_over_time(bare) is None
    assert len(plots_requests.latency_over_time_figure(bare).axes) == 2
    assert len(plots_requests.latency_over_time_figure(results).axes) == 3


def test_slo_targets_are_drawn_in_ms(results):
    fig = plots_requests.latency_over_time_figure(results)
    ttft_ax = fig.axes[0]
    levels = [line.get_ydata()[0] for line in ttft_ax.lines if line.get_linestyle() == ":"]
    assert levels == [pytest.approx(150.0)]


def test_length_histograms_count_every_request(results):
    fig = plots_requests.lengths_figure(results)
    top, bottom = fig.axes
    for ax, frame in ((top, results.requests), (bottom, results.requests[
            results.requests["status"].astype(str) == "completed"])):
        (stairs,) = ax.patches                       # one filled staircase
        assert stairs.get_data().values.sum() == len(frame)
    assert top.get_xscale() == "log"                # lognormal prompts span > 2 decades
    labels = [t.get_text() for t in top.get_xticklabels()]
    assert not any("$" in text for text in labels)  # plain numbers, no mathtext


def test_a_large_cdf_is_drawn_through_its_quantiles():
    values = np.random.default_rng(1).exponential(size=100_000)
    x, y = plots._ecdf(values)
    assert len(x) <= plots.CDF_POINTS
    assert x[0] == values.min() and x[-1] == values.max() and y[-1] == 1.0
    ranks = np.searchsorted(np.sort(values), x, side="right")
    assert np.allclose(ranks / len(values), y)      # each point is on the exact CDF
    small = np.array([3.0, 1.0, 2.0])
    assert plots._ecdf(small)[1].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_the_teams_figure_draws_each_teams_cost(results):
    fig = plots.teams_figure(results)
    cost_ax = fig.axes[1]
    heights = [bar.get_height() for bar in cost_ax.patches]
    assert heights == pytest.approx([results.summary["teams"][t]["cost_usd"]
                                     for t in ("alpha", "beta")])


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(50):
        x, y = rng.integers(0, 6, 12).astype(float), rng.integers(0, 6, 12).astype(float)
        x[rng.integers(0, 12)] = np.nan
        for x_hi, y_hi in ((True, True), (True, False)):
            sx, sy = (x if x_hi else -x), (y if y_hi else -y)
            expect = [bool(np.isfinite(sx[i]) and np.isfinite(sy[i]) and not any(
                sx[j] >= sx[i] and sy[j] >= sy[i] and (sx[j] > sx[i] or sy[j] > sy[i])
                for j in range(12) if j != i)) for i in range(12)]
            assert pareto.front(x, y, x_higher=x_hi, y_higher=y_hi).tolist() == expect


def test_sweep_rows_carry_the_pareto_axes():
    from sim.planning.sweep import summary_row
    summary = {"end_s": 1800.0, "latency_s": {"tpot": {"p50": 0.02}},
               "throughput": {"output_tokens_per_s": 1000.0}, "cost": {"total_usd": 5.0},
               "pools": {"a": {"replicas_mean": 2.0, "tp": 4}, "b": {"replicas_mean": 1.0, "tp": 2}},
               "slo": {"met": False, "fleet": {"objectives": {
                   "ttft_p99": {"margin": 0.25}, "tpot_p99": {"margin": -0.1}}}}}
    row = summary_row(summary)
    assert row["gpus_mean"] == 10.0
    assert row["output_tokens_per_s_per_gpu"] == pytest.approx(100.0)
    assert row["tokens_per_s_per_user"] == pytest.approx(50.0)
    assert row["cost_usd_per_h"] == pytest.approx(10.0)
    assert row["slo_margin_min"] == pytest.approx(-0.1)


def test_provenance_names_each_prices_source_and_date(results):
    text = _provenance(results)
    assert "USD 2.95 per GPU-hour" in text and "set 2026-12-02" in text
    import dataclasses
    pool = results.scenario.pools["p"].model_copy(update={"price_per_gpu_hour": 1.25})
    own = results.scenario.model_copy(update={"pools": {"p": pool}})
    assert "USD 1.25 per GPU-hour, set in the scenario" in _provenance(
        dataclasses.replace(results, scenario=own))


def test_plots_drawn_side_by_side_are_the_same_bytes(results):
    here = plots.render_all(results, processes=1)
    forked = plots.render_all(results, processes=2)
    assert list(forked) == list(plots.FIGURES)
    assert forked == here


def test_no_fork_beside_another_thread(results):
    import threading
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not plots._can_fork()
    finally:
        stop.set()
        other.join()
    assert plots._can_fork() == (threading.active_count() == 1)
