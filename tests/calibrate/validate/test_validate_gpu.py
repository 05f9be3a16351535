"""The published GPU validation table: its reader, its figures and its headline."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import sim
from calibrate import cli
from calibrate.validate import published as vg

ROOT = Path(__file__).resolve().parents[3]
TABLE = ROOT / "scenarios" / "validate" / "gpu" / "published.yaml"


def _requests(rows):
    df = pd.DataFrame(rows, columns=["arrival_s", "first_token_s", "finish_s",
                                     "output_tokens", "status"])
    df["ttft_s"] = df.first_token_s - df.arrival_s
    df["tpot_s"] = np.where(df.output_tokens > 1, (df.finish_s - df.first_token_s)
                            / (df.output_tokens - 1).clip(lower=1), np.nan)
    return df


def test_server_figures_count_the_window_after_warmup_only():
    req = _requests([(5.0, 5.1, 9.0, 40, "completed"),      # warm-up: left out
                     (12.0, 12.2, 20.0, 100, "completed"),
                     (15.0, 15.4, 30.0, 51, "completed"),
                     (25.0, 25.1, 26.0, 1, "completed"),     # one token: no TPOT
                     (31.0, 31.5, 40.0, 30, "completed")])   # after the window
    got = vg.figures(req, "server", warmup_s=10.0, duration_s=30.0)
    assert got["output_tokens_per_s"] == pytest.approx((100 + 51 + 1) / 20.0)
    # a fleet that falls behind: the last of them finishes late, and the rate shows it
    late = req.copy()
    late.loc[2, "finish_s"] = 50.0
    assert vg.figures(late, "server", warmup_s=10.0, duration_s=30.0)[
        "output_tokens_per_s"] == pytest.approx((100 + 51 + 1) / 40.0)
    assert got["ttft_p50_ms"] == pytest.approx(200.0)
    assert got["tpot_p50_ms"] == pytest.approx(np.median([7.8 / 99, 14.6 / 50]) * 1e3)
    assert got["not_completed"] == 0


@pytest.mark.parametrize("kind", ["offline", "closed"])
def test_offline_and_closed_throughput_is_all_output_over_the_makespan(kind):
    req = _requests([(0.0, 1.0, 10.0, 100, "completed"), (0.0, 2.0, 20.0, 300, "completed"),
                     (0.0, math.nan, math.nan, 0, "unfinished")])
    got = vg.figures(req, kind, warmup_s=0.0, duration_s=1.0)
    assert got["output_tokens_per_s"] == pytest.approx(400 / 20.0)
    assert got["not_completed"] == 1


def test_the_headline_counts_p50_at_low_load_and_p99_at_high_load():
    rows = [{"name": "a", "load": "low", "error": {"ttft_p50_ms": 0.1, "ttft_p99_ms": 5.0,
                                                   "output_tokens_per_s": -0.05}},
            {"name": "b", "load": "high", "error": {"ttft_p50_ms": 9.0, "ttft_p99_ms": -0.3,
                                                    "tpot_p99_ms": 0.15}},
            {"name": "c", "load": "high", "error": {"ttft_p99_ms": 0.2,
                                                    "output_tokens_per_s": 0.25}}]
    h = vg.headline(rows)["below_saturation"]
    assert h["ttft"]["n"] == 3 and h["ttft"]["median_abs"] == pytest.approx(0.2)
    assert h["ttft"]["worst"] == {"row": "b p99", "error": -0.3}
    assert h["ttft"]["met"] is True
    assert h["throughput"]["median_abs"] == pytest.approx(0.15) and not h["throughput"]["met"]
    assert h["tpot"]["n"] == 1 and h["tpot"]["met"] is True


def _saturated(ratio, meets, at_capacity=None, capacity="found"):
    return {"bounds_ms": {"ttft_p99": 2000.0}, "bounds_source": "conf",
            "at_published": {"meets": meets, "measured_ms": {"ttft_p99": 1.0}},
            "capacity_ratio": ratio, "capacity": capacity, "binding": "ttft_p99",
            "published_binding": "ttft_p99", "at_capacity": at_capacity}


def _at(ratio, **error):
    return {"rate_scale": ratio, "predicted": {k: 1.0 for k in error}, "error": error}


def test_the_headline_counts_saturated_rows_by_capacity_apart_from_the_others():
    """A saturated row's errors at the published rate count in no median, however large;
    the saturated rows are counted by whether they meet their bounds there and whether
    their capacity ratio lies in [1.0, 1.15], and their latencies at the simulated
    capacity count (p99 on a high-load row) only where the search found it."""
    huge = {"output_tokens_per_s": -0.5, "ttft_p99_ms": 130.0, "tpot_p99_ms": 0.9}
    rows = [{"name": "below", "load": "low", "error": {"ttft_p50_ms": 0.1,
                                                        "output_tokens_per_s": 0.04}},
            {"name": "s1", "load": "high", "error": huge, "saturated": _saturated(
                0.91, False, _at(0.91, ttft_p99_ms=-0.14, tpot_p99_ms=-0.2,
                                 output_tokens_per_s=-0.9))},
            {"name": "s2", "load": "high", "error": huge, "saturated": _saturated(
                1.08, True, _at(1.08, ttft_p99_ms=0.3, tpot_p99_ms=0.1,
                                output_tokens_per_s=0.0))},
            {"name": "s3", "load": "high", "error": huge,
             "saturated": _saturated(1.953, True, None, capacity="above")}]
    h = vg.headline(rows)
    below = h["below_saturation"]
    assert below["ttft"]["n"] == 1 and below["ttft"]["median_abs"] == pytest.approx(0.1)
    assert below["throughput"]["n"] == 1 and below["tpot"]["n"] == 0
    assert below["ttft"]["met"] and below["throughput"]["met"]
    sat = h["saturated"]
    assert sat["n"] == 3 and sat["meet_bounds"] == 2
    assert sat["capacity_ratios"] == {"s1": 0.91, "s2": 1.08, "s3": 1.953}
    assert sat["in_range"] == 1 and sat["met"] is False
    assert sat["at_capacity"]["ttft"]["n"] == 2
    assert sat["at_capacity"]["ttft"]["median_abs"] == pytest.approx((0.14 + 0.3) / 2)
    assert sat["at_capacity"]["tpot"]["worst"] == {"row": "s1 p99", "error": -0.2}
    assert sat["reported_only"] == ["s3"]
    text = vg.markdown({"scenario": {"rows": [dict(r, setting=r["name"], source="src",
                                                   published={k: 1.0 for k in r["error"]},
                                                   predicted={k: 1.0 for k in r["error"]})
                                              for r in rows], "headline": h}})
    assert "| s3 | TTFT p99 ms | 1.0 | n/a | not counted |" in text
    assert "| scenario | 3 | 2 | 1 (missed) | s1 0.91, s2 1.08, s3 1.95 |" in text
    # every saturated row in range: met
    assert vg.headline(rows[:1] + rows[2:3])["saturated"]["met"] is True


@pytest.mark.parametrize("change, message", [
    ({"kind": "batch"}, "rows[0].kind: 'batch' is not one of server, offline, closed"),
    ({"load": "medium"}, "rows[0].load: 'medium' is not one of low, high"),
    ({"published": {"ttft_p90_ms": 5}}, "rows[0].published.ttft_p90_ms: not a figure"),
    ({"published": {"ttft_p50_ms": -1}}, "expected a positive number"),
    ({"published": {"ttft_p50_ms": True}}, "expected a positive number"),
    ({"published": {"ttft_p50_ms": float("inf")}}, "expected a positive number"),
    ({"name": ["a"]}, "rows[0].name: expected a non-empty string"),
    ({"scenario": "nowhere.yaml"}, "rows[0].scenario:"),
])
def test_a_malformed_table_is_refused_naming_row_and_field(tmp_path, change, message):
    (tmp_path / "s.yaml").write_text("x: 1\n")
    row = {"name": "r", "scenario": "s.yaml", "source": "src", "setting": "set",
           "kind": "server", "load": "low", "published": {"ttft_p50_ms": 10.0}, **change}
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump({"rows": [row]}))
    import re
    with pytest.raises(vg.TableError, match=re.escape(message)):
        vg.read_table(path)
    assert cli.main(["validate-gpu", "--table", str(path)]) == 2


SATURATED = {"bounds": {"ttft_p99": "2s", "tpot_p99": "200ms"},
             "bounds_source": "loadgen/mlperf.conf"}


def _table(tmp_path, **change):
    (tmp_path / "s.yaml").write_text("x: 1\n")
    row = {"name": "r", "scenario": "s.yaml", "source": "src", "setting": "set",
           "kind": "server", "load": "low", "published": {"ttft_p50_ms": 10.0}, **change}
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump({"rows": [row]}))
    return path


def test_a_saturated_row_is_read_with_its_bounds_in_seconds_and_their_source(tmp_path):
    row, = vg.read_table(_table(tmp_path, saturated=SATURATED))
    assert row.saturated == vg.Saturated({"ttft_p99": 2.0, "tpot_p99": 0.2},
                                         "loadgen/mlperf.conf")
    row, = vg.read_table(_table(tmp_path))
    assert row.saturated is None


@pytest.mark.parametrize("saturated, message", [
    ({**SATURATED, "bounds": {"ttft_p90": "2s"}},
     "rows[0].saturated.bounds.ttft_p90 (row 'r'): not a bound; choose from ttft_p50, "
     "ttft_p99, tpot_p50, tpot_p99"),
    ({**SATURATED, "bounds": {"ttft_p99": 2}},
     "rows[0].saturated.bounds.ttft_p99 (row 'r'): 2 is not a time with its unit"),
    ({**SATURATED, "bounds": {"ttft_p99": "2 min"}}, "rows[0].saturated.bounds.ttft_p99"),
    ({**SATURATED, "bounds": {"tpot_p99": "0ms"}}, "rows[0].saturated.bounds.tpot_p99"),
    ({**SATURATED, "bounds": {}}, "rows[0].saturated.bounds (row 'r'): expected a mapping"),
    ({"bounds": SATURATED["bounds"]},
     "rows[0].saturated (row 'r'): missing field 'bounds_source'"),
    ({**SATURATED, "bounds_source": " "}, "rows[0].saturated.bounds_source (row 'r')"),
    ({**SATURATED, "bound": {}}, "rows[0].saturated.bound (row 'r'): not a field"),
    (True, "rows[0].saturated (row 'r'): expected a mapping"),
])
def test_a_malformed_saturated_field_is_refused_naming_row_and_field(tmp_path, saturated,
                                                                     message):
    path = _table(tmp_path, saturated=saturated)
    with pytest.raises(vg.TableError, match=re.escape(message)):
        vg.read_table(path)
    assert cli.main(["validate-gpu", "--table", str(path)]) == 2


def test_only_a_server_row_is_marked_saturated_and_a_misspelt_field_is_refused(tmp_path):
    with pytest.raises(vg.TableError, match=re.escape(
            "rows[0].saturated (row 'r'): only a server row")):
        vg.read_table(_table(tmp_path, kind="offline", saturated=SATURATED))
    with pytest.raises(vg.TableError, match=re.escape(
            "rows[0].saturate: not a field; choose from name, scenario")):
        vg.read_table(_table(tmp_path, saturate=SATURATED))


def test_every_mlperf_server_and_interactive_row_is_checked_by_capacity():
    """MLPerf Server and Interactive rows are published at the highest rate within the
    benchmark's bounds (loadgen/mlperf.conf): each is marked saturated with those bounds
    and their source; no other row is."""
    expected = {"krai-h100-vllm-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h200-vllm-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h200-vllm-fp8pre-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h200-sglang-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h100-vllm-interactive": {"ttft_p99": 0.45, "tpot_p99": 0.04},
                "redhat-h100-vllm-8b-server": {"ttft_p99": 2.0, "tpot_p99": 0.1},
                "krai-h200-vllm-v0-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h200-vllm-async-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h200-sglang-fp8pre-server": {"ttft_p99": 2.0, "tpot_p99": 0.2},
                "krai-h200-sglang-043-interactive": {"ttft_p99": 0.45, "tpot_p99": 0.04},
                "hpe-h200-trtllm-8b-interactive": {"ttft_p99": 0.5, "tpot_p99": 0.03},
                "hpe-h200-trtllm-8b-server": {"ttft_p99": 2.0, "tpot_p99": 0.1}}
    # an open submission run well inside the bounds (p99 TTFT 157 ms, TPOT 24 ms against
    # 2 s and 200 ms): not at the edge of capacity, so its latencies are well conditioned
    not_at_capacity = {"flexai-h100-vllm-v0-70b-server"}
    rows = vg.read_table(TABLE)
    marked = {r.name: r.saturated for r in rows if r.saturated is not None}
    assert set(marked) == set(expected)
    for name, sat in marked.items():
        assert sat.bounds_s == pytest.approx(expected[name]), name
    for sat in marked.values():
        assert "loadgen/mlperf.conf" in sat.bounds_source
    assert all("MLPerf" in r.source for r in rows if r.name in marked)
    assert not [r.name for r in rows if "MLPerf" in r.source and r.kind == "server"
                and r.name not in marked and r.name not in not_at_capacity]
    for row in rows:
        if row.name in not_at_capacity:
            assert row.published["ttft_p99_ms"] < 0.2 * 2000 and row.published["tpot_p99_ms"] < 0.2 * 200


def test_the_shipped_table_names_valid_scenarios_once_each():
    rows = vg.read_table(TABLE)
    assert len(rows) >= 15 and len({r.name for r in rows}) == len(rows)
    for row in rows:
        sim.load_scenario(row.scenario)            # raises, naming the field, if invalid
    kinds = {r.kind for r in rows}
    assert kinds == {"server", "offline", "closed"}
    held_out = ("v4.1", "TensorRT-LLM 1.0", "vLLM 0.6.0", "NIM 1.")
    assert not [r.name for r in rows if any(h in r.source for h in held_out)]


def test_a_row_runs_end_to_end_and_writes_its_report(tmp_path, capsys):
    scenario = tmp_path / "one.yaml"
    scenario.write_text(
        "name: one\nduration: 60s\nwarmup: 0s\nworkload:\n  streams:\n    s:\n"
        "      model: llama-3.1-8b\n      arrival: {type: closed, concurrency: 1, "
        "requests: 3}\n      prompt_tokens: 1000\n      output_tokens: 64\npools:\n  p:\n"
        "    model: llama-3.1-8b\n    hardware: H100-SXM\n")
    table = tmp_path / "published.yaml"
    table.write_text(yaml.safe_dump({"rows": [{
        "name": "one", "scenario": "one.yaml", "source": "made up", "setting": "one",
        "kind": "closed", "load": "low", "published": {"tpot_p50_ms": 7.0,
                                                        "ttft_p50_ms": 50.0}}]}))
    out = tmp_path / "out"
    assert cli.main(["validate-gpu", "--table", str(table), "--out", str(out), "--cost-model", "scenario",
                    "--cost-model", "roofline"]) == 0
    report = json.loads((out / "validation-gpu.json").read_text())
    assert set(report) == {"scenario", "roofline"}
    auto, roof = report["scenario"]["rows"][0], report["roofline"]["rows"][0]
    assert "measured vllm kernels" in auto["cost_model"][0] or "calibrated" in auto["cost_model"][0]
    assert roof["cost_model"] == ["roofline"]
    for r in (auto, roof):
        assert r["error"]["tpot_p50_ms"] == pytest.approx(
            r["predicted"]["tpot_p50_ms"] / 7.0 - 1.0)
    assert "| one | TPOT p50 ms | 7.0 |" in (out / "validation-gpu.md").read_text()
    assert cli.main(["validate-gpu", "--table", str(table), "--only", "two"]) == 2
    assert vg._out_problem(out) is None                  # its own reports: replaced


def test_out_never_replaces_a_users_file_or_writes_through_a_link(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "validation-gpu.md").write_text("my notes")
    assert "not written by this script" in vg._out_problem(mine)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "validation-gpu.json").symlink_to(tmp_path / "elsewhere.json")
    assert "symbolic link" in vg._out_problem(linked)
    fresh = tmp_path / "fresh"
    assert vg._out_problem(fresh) is None
    vg._write(fresh / "validation-gpu.md", "text")
    assert (fresh / "validation-gpu.md").read_text() == "text"
    assert [p.name for p in fresh.iterdir()] == ["validation-gpu.md"]


def test_before_checkout_needs_a_checkout_and_no_cost_model(tmp_path, capsys):
    assert cli.main(["validate-gpu", "--before-checkout", str(tmp_path)]) == 2
    assert "holds no fleetsim checkout" in capsys.readouterr().err
    assert cli.main(["validate-gpu", "--before-checkout", str(ROOT), "--cost-model", "roofline"]) == 2
    assert "drop --cost-model" in capsys.readouterr().err


def test_an_invalid_row_scenario_is_refused_before_any_row_runs(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("duration: 10\nworkload: {streams: {}}\npools: {}\n")
    table = tmp_path / "published.yaml"
    table.write_text(yaml.safe_dump({"rows": [{
        "name": "bad", "scenario": "bad.yaml", "source": "s", "setting": "s",
        "kind": "server", "load": "low", "published": {"ttft_p50_ms": 1.0}}]}))
    assert cli.main(["validate-gpu", "--table", str(table)]) == 2
    assert "row bad:" in capsys.readouterr().err


def test_operating_point_sums_the_step_of_littles_law_batch():
    """A Server row's step at its published operating point: throughput / replicas x
    TPOT sequences running, the prompt tokens of one TPOT's arrivals; none for offline."""
    from calibrate.validate.operating_point import operating_point
    rows = {row.name: row for row in vg.read_table(TABLE)}
    assert operating_point(rows["krai-h200-vllm-offline"]) is None
    row = rows["krai-h200-vllm-server"]
    point = operating_point(row)
    tpot_s = row.published["tpot_p50_ms"] / 1e3
    assert point["running"] == pytest.approx(row.published["output_tokens_per_s"] / 8 * tpot_s)
    assert point["prefill_tokens"] == pytest.approx(93 / 8 * 222.3 * tpot_s)
    # a 70B step of hundreds of sequences: tens of milliseconds, not micro- or whole seconds
    assert 20 < point["step_ms"] < 500
    assert point["error"] == pytest.approx(point["step_ms"] / row.published["tpot_p50_ms"] - 1)


def test_krai_rows_run_the_model_krai_served():
    """Krai's open MLPerf results name the model in each result folder: llama3_1-70b-* for
    Llama-3.1-70B (v5.1 and v6.0, the open division's substitute for the llama2-70b
    benchmark's Llama-2-70B; model_path or model_family in each measurements README),
    llama2-70b-* for the benchmark's own Llama-2-70B (v5.0's vLLM 0.6.4 runs). Every Krai
    row's stream and pool name the model of the result folder its source cites."""
    krai = [row for row in vg.read_table(TABLE) if row.name.startswith("krai-")]
    assert len(krai) == 16
    served = {"/llama3_1-70b-": "llama-3.1-70b", "/llama2-70b-": "llama-2-70b"}
    for row in krai:
        scenario = yaml.safe_load(row.scenario.read_text())
        models = [s["model"] for s in scenario["workload"]["streams"].values()]
        models += [p["model"] for p in scenario["pools"].values()]
        assert "open/Krai/results/" in row.source, row.name
        cited = [model for folder, model in served.items() if folder in row.source]
        assert len(cited) == 1 and set(models) == set(cited), row.name
        if cited == ["llama-3.1-70b"]:
            assert "Llama-3.1-70B" in row.source, row.name


def _engine_line(row) -> str:
    """The engine line a row belongs to: its pool's engine preset (``engine@version``,
    the version line its publication ran: see ``_preset_line``), TensorRT-LLM's two
    backends taken together."""
    engines = {p["engine"] for p in yaml.safe_load(row.scenario.read_text())["pools"].values()}
    assert len(engines) == 1, row.name
    engine = engines.pop()
    return "trtllm" if engine.startswith("trtllm@") else engine


def test_each_engine_line_has_a_low_load_row_and_a_saturated_row():
    lines: dict[str, set[str]] = {}
    for row in vg.read_table(TABLE):
        lines.setdefault(_engine_line(row), set()).add(row.load)
    assert set(lines) == {"vllm@v0", "vllm@v1", "vllm@async", "sglang@overlap", "trtllm"}
    assert {line: loads for line, loads in lines.items() if loads != {"low", "high"}} == {}


def _preset_line(engine: str, version: str) -> str:
    """The engine preset (``profiles/engines.yaml``) covering a release: vLLM's V0 before
    0.8, V1 to 0.13, async scheduling on by default from 0.14; SGLang's overlap scheduler
    (its default from 0.4); TensorRT-LLM named by a commit of NVIDIA's MLPerf harness
    (TensorRT engines on the C++ executor), else the PyTorch backend."""
    if engine == "vllm":
        release = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", version).groups())
        line = "v0" if release < (0, 8) else "v1" if release < (0, 14) else "async"
    elif engine == "sglang":
        line = "overlap"
    else:
        line = "cpp" if re.fullmatch(r"[0-9a-f]{40}", version) else "pytorch"
    return f"{engine}@{line}"


def test_an_engine_version_line_names_the_pools_engine_and_the_rows_setting_its_version():
    """A scenario's '# engine version: <engine> <version>' comment agrees with its pool's
    engine, and the row's setting says the same version (or, for a build named by commit,
    its first eight hex digits)."""
    versioned = 0
    for row in vg.read_table(TABLE):
        text = row.scenario.read_text()
        found = re.search(r"^# engine version: (\S+) (\S+)", text, re.M)
        if not found:
            continue
        versioned += 1
        engines = {p["engine"] for p in yaml.safe_load(text)["pools"].values()}
        assert {e.split("@")[0] for e in engines} == {found[1]}, row.name
        assert engines == {_preset_line(found[1], found[2])}, row.name
        version = found[2]
        shown = version[:8] if re.fullmatch(r"[0-9a-f]{40}", version) else version
        assert shown in row.setting, row.name
    assert versioned >= 12
