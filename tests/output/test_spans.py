"""summary.json's windows: rates, utilisation and cost per token over the active span
(first arrival to last terminal event, as vLLM's ``bench serve`` and GuideLLM time a
benchmark), each stream's own span, and the whole run's figures named as such."""
from __future__ import annotations

import numpy as np
import pytest

import sim
from sim.output.spans import Span, billed_gpu_s_within
from sim.planning.sweep import summary_row
from tests.simfactories import make_pool, make_scenario, poisson_stream, uniform


def closed(concurrency: int, requests: int) -> dict:
    return {"arrival": {"type": "closed", "concurrency": concurrency, "requests": requests},
            "prompt_tokens": uniform(200, 2000), "output_tokens": uniform(20, 200)}


@pytest.fixture(scope="module")
def early():
    """200 requests at concurrency 8 that all end within a minute of a one-hour run."""
    return sim.run(make_scenario(stream=closed(8, 200), duration=3600.0,
                                 pool=make_pool(replicas=2)))


def _span_of(req) -> float:
    return float(req["finish_s"].max() - req["arrival_s"].min())


def test_closed_loop_throughput_is_completed_requests_over_the_active_span(early):
    s, req = early.summary, early.requests
    done = req[req["status"].astype(str) == "completed"]
    span_s = _span_of(req)
    assert len(done) == 200 and span_s < 0.05 * s["duration_s"]
    thr = s["throughput"]
    assert thr["requests_per_s"] == pytest.approx(200 / span_s, rel=0.01)
    assert thr["window"] == "active_span"
    assert thr["span_s"] == pytest.approx(span_s, rel=1e-9)
    assert thr["output_tokens_per_s"] == pytest.approx(
        done["output_tokens"].sum() / span_s, rel=0.01)
    assert thr["input_tokens_per_s"] == pytest.approx(
        done["prompt_tokens"].sum() / span_s, rel=0.01)
    # the whole run's figures are still there, under a name that says so
    whole = s["throughput_whole_run"]
    assert whole["window"] == "whole_run" and whole["span_s"] == s["end_s"]
    assert whole["requests_per_s"] == pytest.approx(200 / s["end_s"])
    assert s["active_span"]["span_s"] == pytest.approx(span_s)


def test_closed_loop_cost_per_token_is_the_bill_inside_the_active_span(early):
    s, req = early.summary, early.requests
    pool = s["pools"]["p"]
    price_per_gpu_h = pool["cost_usd"] / pool["gpu_hours"]
    span_s = _span_of(req)
    # two fixed replicas of one GPU each, billed all through the span
    span_usd = 2 * span_s / 3600.0 * price_per_gpu_h
    out_tokens = int(req.loc[req["status"].astype(str) == "completed", "output_tokens"].sum())
    assert s["cost"]["active_span_usd"] == pytest.approx(span_usd, rel=1e-9)
    assert pool["active_span"]["cost_usd"] == pytest.approx(span_usd, rel=1e-9)
    assert pool["active_span"]["replicas_mean"] == pytest.approx(2.0)
    assert s["cost"]["usd_per_million_output_tokens"] == pytest.approx(
        span_usd / out_tokens * 1e6, rel=0.01)
    # the whole run's bill and its cost per token, named so
    assert s["cost"]["total_usd"] == pytest.approx(2 * price_per_gpu_h)
    assert s["cost"]["usd_per_million_output_tokens_whole_run"] == pytest.approx(
        2 * price_per_gpu_h / out_tokens * 1e6)


def test_utilisation_over_the_active_span_counts_all_busy_time_over_its_billed_time(early):
    pool = early.summary["pools"]["p"]
    span = pool["active_span"]
    # the same busy seconds over far fewer billed ones
    busy_gpu_h = pool["busy_frac"] * pool["gpu_hours"]
    assert span["busy_frac"] == pytest.approx(busy_gpu_h / span["gpu_hours"], rel=1e-9)
    assert 0.5 < span["busy_frac"] <= 1.0 and pool["busy_frac"] < 0.05
    assert span["mfu"] == pytest.approx(pool["mfu"] * pool["gpu_hours"] / span["gpu_hours"])


def test_open_loop_active_span_is_about_the_arrival_window():
    res = sim.run(make_scenario(stream=poisson_stream(rate=5.0, prompt_tokens=200,
                                                      output_tokens=20), duration=60.0))
    s = res.summary
    assert s["active_span"]["span_s"] == pytest.approx(60.0, rel=0.03)
    assert s["throughput"]["requests_per_s"] == pytest.approx(
        s["throughput_whole_run"]["requests_per_s"], rel=0.03)
    assert s["cost"]["usd_per_million_output_tokens"] == pytest.approx(
        s["cost"]["usd_per_million_output_tokens_whole_run"], rel=0.03)


def test_each_stream_reports_over_its_own_active_span():
    res = sim.run(make_scenario(
        streams={"bench": closed(4, 40),
                 "bg": poisson_stream(rate=1.0, prompt_tokens=100, output_tokens=10)},
        duration=120.0))
    s, req = res.summary, res.requests
    bench = req[req["stream"].astype(str) == "bench"]
    fig = s["streams"]["bench"]
    span_s = _span_of(bench)
    assert span_s < 0.5 * s["active_span"]["span_s"]
    assert fig["active_span"]["span_s"] == pytest.approx(span_s)
    assert fig["throughput"]["window"] == "stream_active_span"
    assert fig["throughput"]["requests_per_s"] == pytest.approx(40 / span_s, rel=0.01)
    assert fig["completed"] == 40 and s["streams"]["bg"]["requests"] == int(
        (req["stream"].astype(str) == "bg").sum())
    # the streams share the fleet's bill over the run's active span, all of it used
    shared = sum(f["span_cost_share_usd"] for f in s["streams"].values())
    assert shared == pytest.approx(s["cost"]["active_span_usd"], rel=1e-9)


class _Billed:
    gpus_per_replica = 4
    billing_intervals_s = ((0.0, 100.0), (30.0, 50.0), (90.0, 200.0))


def test_billed_gpu_time_inside_a_span_is_each_replicas_overlap_with_it():
    # overlaps with [40, 120]: 60 + 10 + 30 replica-seconds, 4 GPUs each
    assert billed_gpu_s_within(_Billed(), Span(40.0, 120.0)) == pytest.approx(400.0)
    assert billed_gpu_s_within(_Billed(), Span(300.0, 400.0)) == 0.0
    assert billed_gpu_s_within(_Billed(), None) == 0.0


def test_sweep_row_rates_gpus_and_hourly_cost_are_over_the_active_span(early):
    s = early.summary
    row = summary_row(s)
    span_s = s["throughput"]["span_s"]
    assert row["requests_per_s"] == s["throughput"]["requests_per_s"]
    assert row["gpus_mean"] == pytest.approx(2.0)
    assert row["output_tokens_per_s_per_gpu"] == pytest.approx(
        s["throughput"]["output_tokens_per_s"] / 2.0)
    assert row["cost_usd_per_h"] == pytest.approx(s["cost"]["active_span_usd"] * 3600 / span_s)
    assert row["p.busy_frac"] == s["pools"]["p"]["active_span"]["busy_frac"]


def test_every_figure_of_a_sweep_or_compare_row_is_over_one_window(early):
    """A row's cost, each pool's replicas, GPU-hours and KV use are over the active span
    as its rates are: the two fixed replicas are 2 there (not their whole run's share of
    an hour), the cost is the span's bill (the cost per token's), and compare's fleet rows
    agree with the row's GPUs."""
    from sim.planning.compare import fleet_row
    s = early.summary
    span = s["pools"]["p"]["active_span"]
    row = summary_row(s)
    assert row["cost_usd"] == s["cost"]["active_span_usd"] < s["cost"]["total_usd"] / 10
    out_tokens = row["output_tokens_per_s"] * s["throughput"]["span_s"]
    assert row["cost_usd"] / out_tokens * 1e6 == pytest.approx(
        row["usd_per_million_output_tokens"], rel=1e-6)
    assert row["p.replicas_mean"] == pytest.approx(2.0) == span["replicas_mean"]
    assert row["p.gpu_hours"] == span["gpu_hours"] and row["p.kv_util_mean"] == \
        span["kv_util_mean"] > s["pools"]["p"]["kv_util_mean"]
    fleet = fleet_row(s)
    assert fleet["p.gpus_mean"] == pytest.approx(row["gpus_mean"]) == pytest.approx(2.0)
    assert fleet["p.replicas_mean"] == pytest.approx(2.0)
    assert fleet["p.cost_usd"] == pytest.approx(span["cost_usd"])


def test_a_stream_names_its_cost_a_share_of_the_runs_span_bill(early):
    stream = early.summary["streams"]["s"]
    assert "active_span_cost_usd" not in stream
    assert stream["span_cost_share_usd"] == pytest.approx(
        early.summary["cost"]["active_span_usd"])


def test_the_console_names_the_window_of_each_cost(early):
    import io

    from rich.console import Console

    from sim.output.table import print_summary
    screen = io.StringIO()
    print_summary(early.summary, console=Console(file=screen, width=120))
    text = screen.getvalue()
    assert "total cost (whole run)" in text and "cost over the active span" in text
    assert "pools (over the active span)" in text and "cost (whole run)" in text


def test_latencies_have_p95_and_p999_and_are_given_in_ms_too(early):
    s, req = early.summary, early.requests
    done = req[req["status"].astype(str) == "completed"]
    ttft = s["latency_s"]["ttft"]
    assert set(ttft) == {"mean", "p50", "p90", "p95", "p99", "p999"}
    assert ttft["p95"] == pytest.approx(np.percentile(done["ttft_s"], 95))
    assert ttft["p999"] == pytest.approx(np.percentile(done["ttft_s"], 99.9))
    for name, stats in s["latency_s"].items():
        for key, value in stats.items():
            assert s["latency_ms"][name][key] == pytest.approx(value * 1e3)


def test_itl_mean_pools_every_gap_between_tokens_over_all_requests(early):
    s, req = early.summary, early.requests
    done = req[(req["status"].astype(str) == "completed") & (req["output_tokens"] > 1)]
    gaps_s = (done["finish_s"] - done["first_token_s"]).sum()
    itl = s["latency_s"]["itl"]
    assert itl["mean"] == pytest.approx(gaps_s / (done["output_tokens"] - 1).sum())
    # pooled over tokens, not a mean of each request's TPOT
    assert itl["mean"] != pytest.approx(done["tpot_s"].mean(), rel=1e-9)
    assert itl["max"] == pytest.approx(done["max_itl_s"].max())
    assert s["latency_s"]["max_itl"]["p99"] == pytest.approx(
        np.percentile(done["max_itl_s"], 99))
