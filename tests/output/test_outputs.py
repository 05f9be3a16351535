"""Result folders (sim.output.files.outputs), plots (sim.output.pages.plots) and the summary tables (sim.output.table)."""
from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

import sim
from sim.config.errors import ScenarioError
from sim.output.columns import Coded, Table
from sim.output.files.outputs import summary_json, write_outputs
from sim.output.results import RunTables
from sim.output.pages.plots import save_all
from sim.output.table import print_summary

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Two pools, two teams; "capped" rejects long prompts and the short drain
# leaves some requests unfinished (NaN timings).
SCENARIO = """\
name: two-pools
seed: 7
duration: 20s
drain: 1s
sample_interval: 1s
workload:
  streams:
    chat:
      team: search
      model: llama-3.1-8b
      pool: fast
      arrival: {type: poisson, rate: 10/s}
      prompt_tokens: {type: lognormal, mean: 800, cv: 1.0, max: 8000}
      output_tokens: {type: lognormal, mean: 200, cv: 1.0, max: 1000}
    batch:
      team: analytics
      model: llama-3.1-8b
      pool: capped
      arrival: {type: poisson, rate: 3/s}
      prompt_tokens: {type: uniform, low: 2000, high: 6000}
      output_tokens: {type: fixed, value: 100}
pools:
  fast:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 1
  capped:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 1
    max_model_len: 4096
"""

EXPECTED_FILES = ["summary.json", "requests.parquet", "timeseries.csv",
                  "scenario.yaml", "report.html"]
PNG_FILES = ["plots/ttft_cdf.png", "plots/tpot_cdf.png", "plots/e2e_cdf.png",
             "plots/latency_over_time.png", "plots/lengths.png", "plots/queue.png",
             "plots/kv_util.png", "plots/replicas.png", "plots/throughput.png",
             "plots/teams.png"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenario") / "two-pools.yaml"
    path.write_text(SCENARIO)
    return sim.run(sim.load_scenario(path))


@pytest.fixture(scope="module")
def written(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "results" / "two-pools"
    return out, write_outputs(results, out)


@pytest.fixture(scope="module")
def written_png(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "results" / "two-pools-png"
    return out, write_outputs(results, out, png=True)


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_scenario_exercises_rejections_and_unfinished(results):
    req = results.summary["requests"]
    assert req["rejected_total"] > 0 and req["in_flight_at_end"] > 0
    assert len(results.summary["pools"]) == 2 and len(results.summary["teams"]) == 2


def test_all_files_written(written):
    """A default run writes the data, scenario.yaml and report.html; no PNGs (the page
    draws its charts)."""
    out, paths = written
    assert sorted(paths) == sorted(out / f for f in EXPECTED_FILES)
    assert not (out / "plots").exists()
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert not (out / "steps.parquet").exists() and not (out / "steps.csv").exists()
    assert leftovers(out.parent) == []


def test_summary_json_is_strict_and_complete(written, results):
    out, _ = written
    text = (out / "summary.json").read_text()
    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert set(summary["requests"]) >= {"arrived", "completed", "rejected", "in_flight_at_end"}
    for metric in ("ttft", "tpot", "e2e", "queue"):
        assert set(summary["latency_s"][metric]) == {"mean", "p50", "p90", "p95", "p99",
                                                     "p999"}
        assert set(summary["latency_ms"][metric]) == set(summary["latency_s"][metric])
    for key in ("throughput", "throughput_whole_run", "active_span", "pools", "teams",
                "streams", "cost"):
        assert summary[key]
    assert list(summary["pools"]) == ["fast", "capped"]
    assert "wall_s" not in text
    assert summary["requests"]["arrived"] == results.summary["requests"]["arrived"]


def test_summary_json_turns_nan_and_inf_into_null():
    text = summary_json({"a": math.nan, "b": [math.inf, 1.5], "wall_s": 3.0})
    assert json.loads(text) == {"a": None, "b": [None, 1.5]}


def test_parquet_round_trips(written, results):
    out, _ = written
    back = pd.read_parquet(out / "requests.parquet")
    assert list(back.columns) == list(results.requests.columns)
    pd.testing.assert_frame_equal(back, results.requests, check_categorical=False)


def test_the_per_row_tables_are_zstd_parquet_with_text_as_dictionaries(written):
    """requests.parquet's columns are zstd-compressed (a day's table 15% smaller than
    snappy's), its text columns dictionary-encoded; no requests.csv beside it."""
    import pyarrow.parquet as pq
    out, _ = written
    meta = pq.ParquetFile(out / "requests.parquet").metadata
    chunks = [meta.row_group(g).column(c) for g in range(meta.num_row_groups)
              for c in range(meta.num_columns)]
    assert {c.compression for c in chunks} == {"ZSTD"}
    assert all(c.has_dictionary_page for c in chunks if c.path_in_schema in ("team", "status"))
    assert not (out / "requests.csv").exists()


def test_csvs_match_tables(results, tmp_path):
    out = tmp_path / "run"
    paths = write_outputs(results, out, report=False, csv=True)
    assert out / "requests.csv" in paths
    req = pd.read_csv(out / "requests.csv", keep_default_na=False, na_values=[""])
    assert len(req) == results.summary["requests"]["arrived"] == len(results.requests)
    assert list(req.columns) == list(results.requests.columns)
    assert set(req["pool"]) == {"fast", "capped"}
    # Full float precision: values read back exactly.
    for col in ("arrival_s", "ttft_s", "tpot_s"):
        pd.testing.assert_series_equal(req[col], results.requests[col], check_names=False)
    ts = pd.read_csv(out / "timeseries.csv")
    assert len(ts) == len(results.timeseries)
    assert list(ts.columns) == list(results.timeseries.columns)


def test_scenario_yaml_reloads(written, results):
    out, _ = written
    again = sim.load_scenario(out / "scenario.yaml")
    assert again.model_dump(mode="json") == results.scenario.model_dump(mode="json")


def test_summary_names_each_pools_weight_and_kv_dtypes(tmp_path):
    """Each pool's entry in summary.json gives its weight and KV cache precisions beside
    its hardware and TP (fp8 weights over a bf16 cache read apart), so compare can show
    them."""
    import yaml
    data = yaml.safe_load(SCENARIO)
    data["duration"] = "5s"
    data["pools"]["fast"].update(weight_dtype="fp8", kv_dtype="bf16")
    data["pools"]["capped"].update(weight_dtype="fp8", kv_dtype="fp8")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    pools = sim.run(sim.load_scenario(path)).summary["pools"]
    assert {p: (f["weight_dtype"], f["kv_dtype"]) for p, f in pools.items()} == \
        {"fast": ("fp8", "bf16"), "capped": ("fp8", "fp8")}


def test_png_writes_every_plot_beside_the_report(written_png):
    """``png=True`` (``fleetsim run --png``) adds the charts as PNG files under plots/."""
    out, paths = written_png
    assert sorted(paths) == sorted(out / f for f in EXPECTED_FILES + PNG_FILES)
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)


def test_pngs_have_signature(written_png):
    out, _ = written_png
    for name in ("ttft_cdf", "tpot_cdf", "queue", "kv_util", "replicas", "teams"):
        assert (out / "plots" / f"{name}.png").read_bytes()[:8] == PNG_SIGNATURE


def test_existing_folder_refused_without_force(written, results):
    out, _ = written
    before = (out / "summary.json").read_bytes()
    with pytest.raises(ScenarioError) as exc:
        write_outputs(results, out)
    assert "--force" in exc.value.message and exc.value.file == str(out)
    assert exc.value.field is None
    assert (out / "summary.json").read_bytes() == before
    assert leftovers(out.parent) == []


def test_force_replaces_and_output_is_byte_identical(results, tmp_path):
    out = tmp_path / "run"
    first = write_outputs(results, out, png=True)
    snapshot = {p: p.read_bytes() for p in first}
    (out / "summary.json").write_text("from an older run")
    (tmp_path / "sibling").mkdir()
    second = write_outputs(results, out, force=True, png=True)
    assert second == first
    assert (out / "summary.json").read_text() != "from an older run"
    assert (tmp_path / "sibling").is_dir()
    for path, data in snapshot.items():  # PNGs included: no dates, no version tags
        assert path.read_bytes() == data, path.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "sibling"]


def test_empty_folder_is_reused_and_steps_written(results, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    steps = Table({"time_s": np.array([0.5, 1.0]),
                   "pool": Coded(np.array([0, 1]), ["fast", "capped"])})
    tables = dataclasses.replace(results.tables, steps=steps)
    paths = write_outputs(dataclasses.replace(results, tables=tables), out, csv=True)
    assert out / "steps.parquet" in paths and out / "steps.csv" in paths
    expected = pd.DataFrame({"time_s": [0.5, 1.0], "pool": ["fast", "capped"]})
    assert pd.read_csv(out / "steps.csv").equals(expected)
    back = pd.read_parquet(out / "steps.parquet")
    assert back.astype({"pool": object}).equals(expected.astype({"pool": object}))


def test_steps_are_written_as_parquet_without_csv(results, tmp_path):
    """A run recording its steps writes steps.parquet; steps.csv (a day of steps was
    about 1.3 GB of CSV) only with ``csv``."""
    steps = Table({"time_s": np.array([0.5]), "pool": Coded(np.array([0]), ["fast"])})
    tables = dataclasses.replace(results.tables, steps=steps)
    paths = write_outputs(dataclasses.replace(results, tables=tables), tmp_path / "run",
                          report=False)
    assert [p.name for p in paths if p.name.startswith("steps")] == ["steps.parquet"]


def test_file_in_the_way_is_an_error(results, tmp_path):
    out = tmp_path / "run"
    out.write_text("not a folder")
    with pytest.raises(ScenarioError):
        write_outputs(results, out, force=True)
    assert out.read_text() == "not a folder"


def test_failed_write_leaves_nothing(results, tmp_path, monkeypatch):
    import sim.output.pages.report

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sim.output.pages.report, "build_report", boom)
    with pytest.raises(RuntimeError):
        write_outputs(results, tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_plots_survive_empty_results(results, tmp_path):
    requests = results.tables.requests
    none = RunTables(requests[np.zeros(len(requests), dtype=bool)], Table({}))
    empty = dataclasses.replace(results, tables=none, summary={})
    paths = save_all(empty, tmp_path)
    assert [p.name for p in paths] == ["ttft_cdf.png", "tpot_cdf.png", "e2e_cdf.png",
                                       "latency_over_time.png", "lengths.png", "queue.png",
                                       "kv_util.png", "replicas.png", "throughput.png",
                                       "teams.png"]
    assert all(p.read_bytes()[:8] == PNG_SIGNATURE for p in paths)


def test_the_throughput_figure_draws_each_pools_tokens_and_cost_over_time(results):
    """Its two panels hold, per pool, the time series' tokens_per_s and cost_usd_per_h."""
    from sim.output.pages.plots import throughput_figure
    fig = throughput_figure(results)
    tokens, cost = fig.axes[:2]
    ts = results.timeseries
    for ax, column in ((tokens, "tokens_per_s"), (cost, "cost_usd_per_h")):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for pool in ts["pool"].astype(str).unique():
            rows = ts[ts["pool"].astype(str) == pool]
            line = lines[f"pool {pool}"]
            assert np.array_equal(line.get_xdata(), rows["time_s"].to_numpy())
            assert np.array_equal(line.get_ydata(), rows[column].to_numpy())
    assert ts["cost_usd_per_h"].max() > 0 and ts["tokens_per_s"].max() > 0


def test_print_summary_renders(results):
    console = Console(file=io.StringIO(), width=100)
    print_summary(results.summary, console)
    text = console.file.getvalue()
    for word in ("TTFT", "TPOT", "E2E", "fast", "capped", "search", "analytics",
                 "exceeds_max_model_len", "req/s", "ms"):
        assert word in text, word


def test_print_summary_handles_missing_values():
    console = Console(file=io.StringIO())
    print_summary({"latency_s": {"ttft": {"mean": None, "p50": None}}, "cost": {}}, console)
    assert "TTFT" in console.file.getvalue()


def test_idle_capacity_is_its_own_cost_line_and_teams_plus_it_make_the_total():
    """A pool no stream reaches is billed; its cost is in no team's, but in
    unattributed_usd, so teams + unattributed = total."""
    import sim
    from tests.simfactories import make_pool, make_scenario, poisson_stream
    res = sim.run(make_scenario(
        streams={"s": {**poisson_stream(rate=2.0), "pool": "busy", "team": "a"}},
        pools={"busy": make_pool(), "idle": make_pool(replicas=2)}, duration=30.0))
    cost = res.summary["cost"]
    idle = res.summary["pools"]["idle"]["cost_usd"]
    teams = sum(t["cost_usd"] for t in res.summary["teams"].values())
    assert idle > 0 and cost["unattributed_usd"] == pytest.approx(idle, rel=1e-9)
    assert teams + cost["unattributed_usd"] == pytest.approx(cost["total_usd"], rel=1e-9)


def test_names_with_dollar_signs_are_drawn_as_written(tmp_path):
    """A team or pool name holding "$" would start matplotlib's mathtext (and "$^$"
    fails to draw): the plots, the report and a sweep's page draw names as plain text."""
    from sim.cli import main
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: dollars\nseed: 1\nduration: 5s\nworkload:\n  streams:\n    chat:\n"
        "      team: 'a$\\frac{b'\n      model: llama-3.1-8b\n"
        "      arrival: {type: poisson, rate: 4/s}\n      prompt_tokens: 100\n"
        "      output_tokens: 10\n    other:\n      team: '$x$'\n      model: llama-3.1-8b\n"
        "      arrival: {type: poisson, rate: 4/s}\n      prompt_tokens: 100\n"
        "      output_tokens: 10\npools:\n  'c$^$': {model: llama-3.1-8b, hardware: H100-SXM}\n",
        encoding="utf-8")
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet",
                 "--png"]) == 0
    assert (tmp_path / "out" / "plots" / "teams.png").stat().st_size > 0
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
    assert main(["sweep", str(scenario), "--vary", "pools.c$^$.replicas=1,2", "--vary",
                 "seed=1,2", "--out", str(tmp_path / "sw.csv"), "--report",
                 str(tmp_path / "sw.html"), "--quiet"]) == 0
    assert (tmp_path / "sw.html").stat().st_size > 0


def test_each_teams_latency_leaves_out_the_warm_up_as_the_overall_figures_do():
    """A team's ttft_p99_s is over its completed requests that arrived after the warm-up,
    like latency_s; its counts and cost take in every request."""
    from tests.simfactories import make_pool, make_scenario, poisson_stream
    res = sim.run(make_scenario(streams={"s": {**poisson_stream(rate=20.0), "team": "a"}},
                                pools={"main": make_pool(replicas=1)}, duration=30.0,
                                warmup=10.0))
    req = res.requests
    done = req[(req["status"] == "completed") & (req["team"] == "a")]
    measured = done[done["arrival_s"] >= 10.0]
    assert 0 < len(measured) < len(done)
    team = res.summary["teams"]["a"]
    assert team["ttft_p99_s"] == pytest.approx(measured["ttft_s"].quantile(0.99), rel=1e-12)
    assert team["ttft_p99_s"] != pytest.approx(done["ttft_s"].quantile(0.99), rel=1e-6)
    assert team["completed"] == len(done)
    assert res.summary["latency_s"]["ttft"]["p99"] == pytest.approx(team["ttft_p99_s"])


def test_tables_into_a_file_never_cut_a_figure():
    """Into a file or a CI log rich assumed 80 columns and cut a team's cost to
    '$1,299.…'; every figure is now written whole, whatever the width."""
    teams = {f"team-with-a-rather-long-name-{i}": {
        "requests": 123456789, "completed": 123456789, "rejected": 0,
        "input_tokens": 98765432101, "output_tokens": 12345678901, "cost_usd": 1299.8765}
        for i in range(3)}
    console = Console(file=io.StringIO(), width=40)
    assert not console.is_terminal
    print_summary({"latency_s": {}, "cost": {}, "teams": teams}, console)
    text = console.file.getvalue()
    assert "…" not in text and "..." not in text
    assert text.count("98,765,432,101") == 3 and text.count("team-with-a-rather-long-name-2") == 1
    assert "$1,299" in text


def test_names_print_as_written_not_as_markup(capsys):
    """The summary printed to standard output reads no rich markup or emoji codes in the
    scenario's names: a team named "[red]x:smile:" prints as itself."""
    teams = {"[red]x:smile:": {"requests": 1, "completed": 1, "rejected": 0,
                               "input_tokens": 1, "output_tokens": 1, "cost_usd": 1.0}}
    print_summary({"scenario": "[bold]plan", "latency_s": {}, "cost": {}, "teams": teams})
    out = capsys.readouterr().out
    assert "[red]x:smile:" in out and "[bold]plan" in out


def test_means_over_no_samples_are_null_not_zero(tmp_path):
    """A sample interval as long as the run (which ends before 20 s when its last
    request does) leaves no sample inside it: the pools' means over the samples are null
    (no figure), not 0."""
    from simfactories import make_pool, make_scenario, poisson_stream
    res = sim.run(make_scenario(stream={**poisson_stream(rate=2.0), "output_tokens": 10},
                                pools={"p": make_pool(replicas=1)}, duration=20.0,
                                sample_interval=20.0))
    assert len(res.timeseries) == 0 and len(res.requests) > 0
    pool = res.summary["pools"]["p"]
    assert pool["kv_util_mean"] is None and pool["queue_mean"] is None
    write_outputs(res, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["pools"]["p"][
        "queue_mean"] is None


def test_pool_table_counts_pipeline_stages():
    """The pools table's 'TP x replicas' cell shows pp when a replica has several stages
    (tp=2, pp=2, 3 replicas bill 12 GPUs: 'TP2 x PP2 x 3', not '2 x 3'); at pp = 1 the
    cell is as it was."""
    from simfactories import make_pool, make_scenario
    from sim.output.table import _replicas
    res = sim.run(make_scenario(pool=make_pool(tp=2, pp=2, replicas=3), duration=5.0))
    pool = res.summary["pools"]["p"]
    assert pool["gpu_hours"] * 3600 / res.summary["end_s"] == pytest.approx(12.0)
    assert _replicas(pool) == "TP2 x PP2 x 3"
    assert _replicas({**pool, "replicas_mean": 2.5, "replicas_max": 3}) == \
        "TP2 x PP2 x 2.5 (max 3)"
    assert _replicas({**pool, "pp": 1}) == "2 x 3"
    assert _replicas({"tp": 4, "replicas_mean": 2, "replicas_max": 2}) == "4 x 2"
    console = Console(file=io.StringIO(), width=200)
    print_summary(res.summary, console)
    assert "TP2 x PP2 x 3" in console.file.getvalue()
