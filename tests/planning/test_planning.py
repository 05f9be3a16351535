"""Capacity-planning workflows: size, sweep, replications, check, compare."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import sim
from sim.config import profiles
from sim.cli import main
from sim.config.scenario import Scenario
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.config.overrides import parse_vary, with_values
from sim.planning.runner import run_many
from sim.planning.size import size
from sim.planning.trial import evaluate
from sim.config.slos import parse_slo
from sim.planning.stats import aggregate
from sim.planning.sweep import sweep

ROOT = Path(__file__).resolve().parents[2]


def chat(duration: float = 60, rate: float = 12, replicas: int = 1, seed: int = 2) -> Scenario:
    return Scenario.model_validate({
        "name": "plan", "seed": seed, "duration": duration, "drain": 600,
        "workload": {"streams": {"chat": {
            "model": "llama-3.1-8b", "arrival": {"type": "poisson", "rate": rate},
            "prompt_tokens": {"type": "lognormal", "mean": 1500, "cv": 0.8, "max": 8000},
            "output_tokens": {"type": "lognormal", "mean": 250, "cv": 0.8, "max": 1500}}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM", "replicas": replicas,
                        "router": {"type": "least_outstanding"},
                        "sizing": {"hardware": ["H100-SXM", "H200"], "max_replicas": 16}}},
    })


def test_size_finds_the_true_minimum():
    """The replica count size returns meets the SLOs and one fewer does not
    (both checked by running them), for every hardware option."""
    scenario = chat(rate=30)
    slos = [parse_slo("ttft_p99=0.5s"), parse_slo("tpot_p99=40ms")]
    table = size(scenario, slos)
    assert set(table.hardware) == {"H100-SXM", "H200"} and table.feasible.all()
    for row in table.itertuples():
        at = with_values(scenario, {"pools.p.hardware": row.hardware})
        assert evaluate(with_values(at, {"pools.p.replicas": row.replicas}), "p", slos)[1]
        if row.replicas > 1:
            fewer = with_values(at, {"pools.p.replicas": row.replicas - 1})
            assert not evaluate(fewer, "p", slos)[1]
    assert table.iloc[0].cost_usd_per_h <= table.iloc[-1].cost_usd_per_h


def test_sweep_is_identical_on_one_process_two_processes_and_dask(tmp_path, monkeypatch):
    """The same grid gives the same table whatever runs it; the local Dask cluster leaves
    no scratch folder behind in the temporary folder."""
    scenario = chat(duration=20)
    varies = [parse_vary("pools.p.replicas=1..2:1"), parse_vary("workload.rate_scale=0.5,1")]
    one = sweep(scenario, varies)
    two = sweep(scenario, varies, workers=2)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)       # read TMPDIR again
    dask = sweep(scenario, varies, executor="dask", workers=2)
    assert list(tmp_path.iterdir()) == []
    assert len(one) == 4
    pd.testing.assert_frame_equal(one, two)
    pd.testing.assert_frame_equal(one, dask)
    assert one["ttft_p99_s"].iloc[0] != one["ttft_p99_s"].iloc[1]


def test_vary_values_are_cut_at_the_commas_between_values_only():
    """A flow mapping or list, or a quoted string, is one value of a --vary (it was cut at
    its own commas into pieces read as strings); '..' in a mapping is no range."""
    fixed, target = {"type": "fixed"}, {"type": "target", "metric": "queue_per_replica",
                                        "target": 4}
    assert parse_vary("pools.p.autoscaler={type: fixed},{type: target, "
                      "metric: queue_per_replica, target: 4}") == \
        ("pools.p.autoscaler", [fixed, target])
    assert parse_vary("pools.p.sizing.tp=[1, 2],[4]")[1] == [[1, 2], [4]]
    assert parse_vary("pools.p.model=\"a, b\",it's")[1] == ["a, b", "it's"]
    assert parse_vary("workload.streams.s.arrival={type: trace, path: ../t.csv}")[1] == \
        [{"type": "trace", "path": "../t.csv"}]
    assert parse_vary("seed=1,2,3")[1] == [1, 2, 3] and parse_vary("seed=1..3")[1] == [1, 2, 3]


def service_time_s() -> float:
    """Service of one fixed request (prompt 256, 64 output tokens) on the
    single scheduler, from the cost model: a prefill step then 63 decodes."""
    cost = RooflineCostModel(profiles.find_model("llama-3.1-8b"),
                             profiles.find_hardware("H100-SXM"), 1, "bf16", "bf16",
                             RooflineConfig())
    t = cost.step_scalar(256, 1, 256 * 128.0, 0)[0]
    return t + sum(cost.step_scalar(1, 1, 0, 256 + i)[0] for i in range(1, 64))


def single_server(rho: float, seed: int) -> Scenario:
    s = service_time_s()
    return Scenario.model_validate({
        "name": "md1", "seed": seed, "duration": 3000 * s / rho, "warmup": 300 * s / rho,
        "workload": {"streams": {"q": {"model": "llama-3.1-8b",
                                       "arrival": {"type": "poisson", "rate": rho / s},
                                       "prompt_tokens": 256, "output_tokens": 64}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM",
                        "scheduler": {"type": "single"},
                        # service time S: the roofline's own host terms, added (a
                        # synchronous engine), no front end
                        "cost_model": {"type": "roofline", "step_overhead": 1e-3},
                        "engine": "vllm@v1", "front_end": 0}},
    })


def test_theory_replication_intervals_shrink_and_cover_the_md1_wait():
    """Mean queueing delay over replications of an M/D/1 queue: the 95%
    interval covers W = rho·S / (2(1 − rho)) and narrows with more seeds."""
    rho, s = 0.6, service_time_s()
    theory = rho * s / (2 * (1 - rho))
    summaries = run_many([single_server(rho, seed) for seed in range(12)], workers=2)
    few = aggregate(summaries[:4])["latency_s.queue.mean"]
    many = aggregate(summaries)["latency_s.queue.mean"]
    assert many["ci95_low"] <= theory <= many["ci95_high"]
    assert many["half_width"] < few["half_width"]


def test_check_passes_unchanged_and_fails_when_load_rises(tmp_path, capsys):
    """check exits 0 against its own baseline, 1 once the load is raised."""
    base = chat(duration=30, rate=10).model_dump(mode="json")
    path = tmp_path / "s.yaml"
    import yaml
    path.write_text(yaml.safe_dump(base))
    baseline = tmp_path / "baseline.json"
    args = ["check", str(path), "--baseline", str(baseline), "--slo", "ttft_p99=1s"]
    assert main(args + ["--update"]) == 0
    assert main(args) == 0
    base["workload"]["streams"]["chat"]["arrival"]["rate"] = 40
    path.write_text(yaml.safe_dump(base))
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "required replicas" in out


def test_check_counts_the_replicas_the_load_needs_whatever_the_sizing_floor(tmp_path):
    """A sizing floor of 3 kept for redundancy: size answers at least 3, check's required
    replicas stay what the load needs (1 at this rate), so a drift in it shows."""
    import yaml
    from sim.planning.check import measure_scenario
    data = chat(duration=30, rate=4).model_dump(mode="json")
    data["pools"]["p"]["sizing"] = {"max_replicas": 8, "min_replicas": 3}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    slos = [parse_slo("ttft_p99=1s")]
    measured = measure_scenario(str(path), slos)
    assert measured["pools"]["p"]["required_replicas"] == 1
    assert size(sim.load_scenario(str(path)), slos).iloc[0]["replicas"] == 3


def test_check_says_what_a_missing_figure_means():
    """A pool the baseline lacks, a count none within the cap reached and a latency no
    request gave are said in words (they printed None)."""
    from sim.planning.check import drift
    now = {"pools": {"p": {"required_replicas": None, "slo_met_as_configured": True},
                     "q": {"required_replicas": 2, "slo_met_as_configured": True}},
           "latency_s": {"ttft_p99": None, "tpot_p99": 0.02}, "slos": {}}
    base = {"pools": {"p": {"required_replicas": 3}},
            "latency_s": {"ttft_p99": 0.5, "tpot_p99": None}}
    assert drift(base, now, 0.05) == [
        "pool p: required replicas 3 -> none within the cap",
        "pool q: not in the baseline (record it with --update)",
        "ttft_p99: 500.0 ms -> none (no request completed)",
        "tpot_p99: none (no request completed) -> 20.0 ms"]


def test_failed_check_names_each_slo_its_value_target_baseline_and_replicas_needed(
        tmp_path, capsys):
    """A load raised fourfold: the failed check's line for the pool names each SLO it
    breaks, the value now, the target, the baseline's value and the replicas now needed
    (it said only 'breaks the SLOs as configured'); the JUnit report and --json carry it,
    and --json gives the figures as numbers."""
    import yaml
    base = chat(duration=30, rate=10).model_dump(mode="json")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base))
    baseline = tmp_path / "baseline.json"
    args = ["check", str(path), "--baseline", str(baseline), "--slo", "ttft_p99=1s",
            "--slo", "tpot_p99=50ms"]
    assert main(args + ["--update"]) == 0
    base["workload"]["streams"]["chat"]["arrival"]["rate"] = 40
    path.write_text(yaml.safe_dump(base))
    capsys.readouterr()
    assert main(args + ["--junit", str(tmp_path / "check.xml")]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "breaks the SLOs" in line)
    recorded = json.loads(baseline.read_text())["s.yaml"]["pools"]["p"]
    assert line.startswith("s.yaml: pool p: breaks the SLOs as configured (1 replica): ")
    assert "ttft_p99 " in line and "over its target 1.00 s" in line
    assert "tpot_p99 " in line and "over its target 50.0 ms" in line
    assert f"(baseline {recorded['slo_values']['ttft_p99'] * 1e3:.1f} ms)" in line
    assert line.endswith("required replicas 1 -> 3")
    from xml.etree import ElementTree
    failure = ElementTree.parse(tmp_path / "check.xml").find(".//failure")
    assert failure.get("message") == line.partition(": ")[2]     # the first problem
    assert main(args + ["--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)["scenarios"][0]
    assert line.partition(": ")[2] in verdict["problems"]
    pool = verdict["measured"]["pools"]["p"]
    assert pool["required_replicas"] == 3 and pool["slo_met_as_configured"] is False
    assert pool["slo_values"]["ttft_p99"] > 1.0
    assert verdict["baseline"]["pools"]["p"]["slo_values"] == recorded["slo_values"]


def test_drift_names_an_slo_that_moved_and_one_never_reached():
    """Required replicas drifted while the fleet as configured still meets its SLOs: the SLO
    that moved past the tolerance is named with its value, target and the baseline's; a
    percentile too few requests reached and a missed attainment are said in words."""
    from sim.planning.check import drift
    slos = {"ttft_p99": 1.0, "tpot_p99": 0.05}
    base = {"pools": {"p": {"required_replicas": 2, "slo_values": {"ttft_p99": 0.2,
                                                                  "tpot_p99": 0.02}}},
            "latency_s": {}, "slos": slos}
    now = {"pools": {"p": {"required_replicas": 3, "slo_met_as_configured": True,
                           "replicas": 4, "slo_values": {"ttft_p99": 0.6,
                                                         "tpot_p99": 0.0201}}},
           "latency_s": {}, "slos": slos}
    assert drift(base, now, 0.05) == [
        "pool p: required replicas 2 -> 3; as configured (4 replicas): ttft_p99 600.0 ms, "
        "within its target 1.00 s (baseline 200.0 ms)"]
    slos = {"ttft_p99": 1.0, "attainment": 0.99}
    base["slos"] = now["slos"] = slos
    now["pools"]["p"].update(slo_met_as_configured=False, required_replicas=None,
                             slo_values={"ttft_p99": None, "attainment": 0.5})
    base["pools"]["p"]["slo_values"] = {"ttft_p99": 0.2}
    assert drift(base, now, 0.05) == [
        "pool p: breaks the SLOs as configured (4 replicas): ttft_p99 none (too few "
        "requests completed), over its target 1.00 s (baseline 200.0 ms); attainment "
        "50.0 %, under its target 99.0 % (baseline not recorded); required replicas "
        "2 -> none within the cap"]


def test_check_update_warns_when_the_fleet_it_records_breaks_its_slos(tmp_path, capsys):
    """--update of a fleet that misses its TTFT target writes the baseline, exits 0 and
    says on stderr which pool breaks which SLO and the replicas it needs; a fleet that
    meets them gets no warning."""
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=30, rate=40).model_dump(mode="json")))
    baseline = tmp_path / "baseline.json"
    args = ["check", str(path), "--baseline", str(baseline), "--update"]
    assert main(args + ["--slo", "ttft_p99=1s"]) == 0
    out, err = capsys.readouterr()
    assert baseline.exists() and out.startswith("wrote ")
    assert err.startswith("fleetsim check: warning: the baseline records fleets that "
                          "break their SLOs")
    assert "s.yaml: pool p breaks its SLOs as configured (1 replica): ttft_p99 " in err
    assert "over its target 1.00 s; needs 2 replicas" in err
    assert main(args + ["--slo", "ttft_p99=600s"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("extra", [[], ["--max-rate"]])
def test_size_exits_1_when_no_option_meets_the_slos(tmp_path, capsys, extra):
    """A TTFT of 1 us: no replica count (and no fraction of the load) meets it; the table
    still prints, the verdict goes to stderr, the exit code says no. A reachable SLO: 0."""
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=4).model_dump(mode="json")))
    assert main(["size", str(path), "--slo", "ttft_p99=1us", *extra]) == 1
    out, err = capsys.readouterr()
    assert "SLOs not met" in out
    assert err.startswith("fleetsim size: ") and "meets the SLOs for pool(s) p" in err
    assert main(["size", str(path), "--slo", "ttft_p99=10s", *extra]) == 0
    assert capsys.readouterr().err == ""


def test_replications_cli_writes_intervals(tmp_path, capsys):
    """run --replications N reports every figure as a mean with a 95% CI."""
    out = tmp_path / "reps"
    assert main(["run", str(ROOT / "scenarios" / "v2-continuous.yaml"), "--duration", "10s",
                 "--replications", "3", "--out", str(out), "--quiet"]) == 0
    data = json.loads((out / "replications.json").read_text())
    assert data["seeds"] == [7, 8, 9]
    fig = data["figures"]["latency_s.ttft.p50"]
    assert fig["n"] == 3 and fig["ci95_low"] <= fig["mean"] <= fig["ci95_high"]


def test_compare_result_folders(tmp_path, capsys):
    """compare shows each run's figures and each later run's change from the first, as
    text or JSON."""
    for name, rate in (("a", "1"), ("b", "2")):
        assert main(["run", str(ROOT / "scenarios" / "v2-continuous.yaml"), "--duration", "10s",
                     "--set", f"workload.rate_scale={rate}", "--out", str(tmp_path / name),
                     "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "requests_per_s" in out and "b vs a %" in out and "NaN" not in out
    rejected = next(line for line in out.splitlines() if line.startswith("rejected "))
    assert rejected.split()[-1] == "-"          # a change from 0: no number
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a"),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["runs"]) == ["1: a", "2: b", "3: a"]
    row = next(r for r in data["figures"] if r["figure"] == "arrived")
    assert row["3: a vs 1: a %"] == 0.0
    assert row["2: b vs 1: a %"] == pytest.approx((row["2: b"] - row["1: a"]) / row["1: a"]
                                                  * 100)
    assert row["2: b"] > row["1: a"]


def test_compare_takes_a_run_that_missed_its_slo(tmp_path, capsys):
    """A run whose fleet missed an SLO has a negative margin; compare shows it beside one
    that met it (it was refused as 'below zero: not a summary.json fleetsim wrote')."""
    for name, target in (("missed", "1ms"), ("met", "60s")):
        assert main(["run", str(ROOT / "scenarios" / "v2-continuous.yaml"), "--duration",
                     "10s", "--set", f"slos={{ttft_p99: {target}}}", "--out",
                     str(tmp_path / name), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "missed"), str(tmp_path / "met")]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    verdict = next(line for line in out.splitlines() if line.startswith("slo_met "))
    assert verdict.split()[1:3] == ["MISSED", "met"]
    margin = next(line for line in out.splitlines() if line.startswith("slo_margin_min "))
    assert float(margin.split()[1].replace(",", "")) < 0 < float(margin.split()[2])
    # a margin risen from below zero is a rise in percent too (over the first's size)
    assert margin.split()[3].startswith("+") and margin.split()[4] == "better", margin


def test_compare_shows_what_differs_between_the_fleets_and_marks_better_and_worse(
        tmp_path, capsys):
    """Two fleets (H100 TP1 bf16 x 1 against H200 TP2 fp8 weights x 2): compare shows each
    pool's hardware, TP, PP, weight and KV dtypes, replicas, GPUs and cost, marks the fleet
    attributes that differ, and marks latency, cost and throughput better or worse by their
    direction; --json carries the same marks."""
    import yaml
    data = chat(duration=10, rate=4).model_dump(mode="json")
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(data))
    data["pools"]["p"].update(hardware="H200", tp=2, weight_dtype="fp8", replicas=2)
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(data))
    runs = [str(tmp_path / "small.yaml"), str(tmp_path / "big.yaml")]
    assert main(["compare", *runs, "--json"]) == 0
    rows = {r["figure"]: r for r in json.loads(capsys.readouterr().out)["figures"]}
    # the means are time-weighted sums over the run: to 9 digits, not to the last bit
    exact = lambda v: round(v, 9) if isinstance(v, float) else v  # noqa: E731
    seen = {f: (exact(rows[f"p.{f}"]["small"]), exact(rows[f"p.{f}"]["big"]),
                rows[f"p.{f}"]["big vs small"])
            for f in ("hardware", "tp", "pp", "weight_dtype", "kv_dtype", "replicas_mean",
                      "replicas_max", "gpus_mean")}
    assert seen == {"hardware": ("H100-SXM", "H200", "differs"), "tp": (1, 2, "differs"),
                    "pp": (1, 1, "same"), "weight_dtype": ("bf16", "fp8", "differs"),
                    "kv_dtype": ("bf16", "bf16", "same"), "replicas_mean": (1, 2, "differs"),
                    "replicas_max": (1, 2, "differs"), "gpus_mean": (1, 4, "differs")}
    for figure, higher_is_better in (("p.cost_usd", False), ("cost_usd_per_h", False),
                                     ("ttft_p99_s", False), ("tpot_p50_s", False),
                                     ("output_tokens_per_s_per_gpu", True)):
        row = rows[figure]
        better = (row["big"] > row["small"]) == higher_is_better
        assert row["big vs small"] == ("better" if better else "worse"), figure
    assert rows["p.cost_usd"]["big vs small"] == "worse"
    assert rows["arrived"]["big vs small"] == "same"
    assert main(["compare", *runs]) == 0
    text = capsys.readouterr().out
    hardware = next(line for line in text.splitlines() if line.startswith("p.hardware "))
    assert hardware.split() == ["p.hardware", "H100-SXM", "H200", "-", "differs"]
    cost = next(line for line in text.splitlines() if line.startswith("p.cost_usd "))
    assert cost.split()[-1] == "worse"


def test_compare_set_overrides_the_scenarios_it_runs_not_the_result_folders(tmp_path,
                                                                            capsys):
    """compare --set changes each scenario run now as run --set does; a result folder is
    compared as it was run, and --set with only result folders is refused (exit 2)."""
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=10, rate=4).model_dump(mode="json")))
    assert main(["run", str(path), "--out", str(tmp_path / "ran"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "ran"), str(path), "--set",
                 "pools.p.replicas=2", "--json"]) == 0
    rows = {r["figure"]: r for r in json.loads(capsys.readouterr().out)["figures"]}
    assert rows["p.replicas_mean"]["ran"] == 1.0 and rows["p.replicas_mean"]["s"] == 2.0
    assert main(["compare", str(tmp_path / "ran"), str(tmp_path / "ran"), "--set",
                 "pools.p.replicas=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set changes the scenarios compare runs now, and every "
                          "RUN here is a result folder")


def test_check_set_overrides_every_scenario_checked(tmp_path, capsys):
    """check --set measures the scenario as overridden, with --update as without: a fleet
    of 3 recorded with --set passes with the same --set; the baseline's entry records the
    --set list, and a check without it (once compared against figures made under other
    traffic without a word) fails saying the --set lists differ, as differing SLOs do."""
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=30, rate=40).model_dump(mode="json")))
    args = ["check", str(path), "--baseline", str(tmp_path / "b.json"), "--slo",
            "ttft_p99=1s"]
    assert main(args + ["--update", "--set", "pools.p.replicas=3"]) == 0
    assert capsys.readouterr().err == ""             # 3 replicas meet the SLOs: no warning
    assert main(args + ["--set", "pools.p.replicas=3"]) == 0
    (entry,) = json.loads((tmp_path / "b.json").read_text()).values()
    assert entry["set"] == ["pools.p.replicas=3"]
    capsys.readouterr()
    assert main(args) == 1
    assert capsys.readouterr().out == (
        "s.yaml: --set differs from the baseline's (no --set against --set "
        "pools.p.replicas=3): its figures were made under other settings and are not "
        "comparable; check with the baseline's --set or record it anew with --update\n")
    assert main(args + ["--set", "pools.p.replicas=4"]) == 1
    assert "(--set pools.p.replicas=4 against --set pools.p.replicas=3)" in \
        capsys.readouterr().out


@pytest.mark.parametrize("command", ["check", "compare"])
def test_a_bad_set_path_on_check_and_compare_names_the_field_and_its_choices(
        tmp_path, capsys, command):
    """A misspelt --set path is refused before anything runs, exit 2, naming the scenario,
    the field and the valid choices, as run --set does."""
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=10, rate=4).model_dump(mode="json")))
    extra = ["--baseline", str(tmp_path / "b.json"), "--slo", "ttft_p99=1s", "--update"] \
        if command == "check" else [str(path)]
    assert main([command, str(path), *extra, "--set", "pools.q.replicas=2"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: pools.q.replicas: with --set: no field 'q' at pools; " \
                  "valid: p\n"
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["sweep", "scenarios/quickstart.yaml", "--vary", "pools.mian.replicas=1,2"],
     "did you mean 'main'"),
    (["size", "scenarios/quickstart.yaml", "--slo", "ttft_p999=1s"], "unknown metric"),
    (["size", "scenarios/quickstart.yaml", "--slo", "ttft_p99=soon"], "ttft_p99"),
    (["sweep", "scenarios/quickstart.yaml", "--vary", "pools.main.replicas=8..2"], "empty"),
])
def test_bad_planning_arguments_exit_2(argv, fragment, capsys, monkeypatch):
    """A wrong --vary path, an unknown SLO metric or a bad value is a clear error."""
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and "Traceback" not in err


def test_drift_from_a_zero_latency_names_the_change_without_dividing_by_it():
    from sim.planning.check import drift
    base = {"pools": {"p": {"required_replicas": 1}}, "latency_s": {"ttft_p99": 0.0,
                                                                    "tpot_p99": -0.0}}
    now = {"pools": {"p": {"required_replicas": 1, "slo_met_as_configured": True}},
           "latency_s": {"ttft_p99": 0.25, "tpot_p99": 0.0}}
    assert drift(base, now, 0.05) == ["ttft_p99: 0 ms -> 250.0 ms"]


def test_a_latency_that_moved_names_its_target_and_whether_it_is_within_it():
    """A latency past the tolerance that still meets its SLO was said without its target
    ('ttft_p99: 0.06234 s -> 0.7006 s (+1023.7%)'): each SLO's line now carries its target
    and which side of it the value is, in the units of the rest of check's message; a
    latency no SLO bounds is said without one."""
    from sim.planning.check import drift
    base = {"pools": {"p": {"required_replicas": 1}},
            "latency_s": {"ttft_p99": 0.06234, "tpot_p99": 0.02, "e2e_p99": 3.0}}
    now = {"pools": {"p": {"required_replicas": 1, "slo_met_as_configured": True}},
           "latency_s": {"ttft_p99": 0.7006, "tpot_p99": 0.06, "e2e_p99": 6.0},
           "slos": {"ttft_p99": 2.0, "tpot_p99": 0.05}}
    assert drift({**base, "slos": now["slos"]}, now, 0.05) == [
        "ttft_p99: 62.3 ms -> 700.6 ms (+1023.8%), within its target 2.00 s",
        "tpot_p99: 20.0 ms -> 60.0 ms (+200.0%), over its target 50.0 ms",
        "e2e_p99: 3.00 s -> 6.00 s (+100.0%)"]


def test_replication_figures_leave_out_the_seed_and_never_go_below_zero():
    """The seed names a run, it is no figure to average; a wide interval around a small
    mean stops at 0, since no count, latency or cost is negative."""
    summaries = [{"seed": 3, "latency_s": {"queue": {"mean": x}}} for x in (0.0, 0.0, 0.9)]
    figures = aggregate(summaries)
    assert "seed" not in figures
    queue = figures["latency_s.queue.mean"]
    assert queue["mean"] == pytest.approx(0.3)
    assert queue["ci95_low"] == 0.0 and queue["ci95_high"] > 0.9
    assert queue["half_width"] > queue["mean"]      # the interval's width is kept as it is


def test_max_rate_stops_where_a_larger_load_would_be_refused():
    """Doubling the load past max_requests ended the search in an error about the
    scenario; it now stops there and says how far it got and why."""
    from sim.config.overrides import with_values
    from sim.planning.size import max_rate
    from sim.config.slos import parse_slo
    scenario = with_values(chat(duration=20, rate=4), {"max_requests": 400})
    row = max_rate(scenario, [parse_slo("ttft_p99=1000s")], "p")
    assert row["feasible"] and row["rate_scale"] in (1.0, 2.0, 4.0)
    assert f"{row['rate_scale'] * 2:g}x would be refused" in row["note"]
    assert "max_requests = 400" in row["note"]


def test_t_quantiles_past_thirty_degrees_of_freedom_are_not_the_normal_ones():
    """1.96 for every n > 31 made intervals up to 4% too narrow (t at 31 dof is 2.040)."""
    from sim.planning.stats import t975
    assert t975(1) == pytest.approx(12.706, abs=1e-3)
    assert t975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t975(120) == pytest.approx(1.9799, abs=1e-4)


def test_setting_a_blocks_type_drops_the_old_types_defaults_but_not_the_users_settings():
    """--set pools.p.scheduler.type=single on a pool with the default continuous scheduler
    gave eight 'unknown key' errors about settings nobody wrote; a setting the user gave
    the old type is still theirs, and named."""
    from sim.config.overrides import with_values
    plain = chat(duration=10, rate=2)
    single = with_values(plain, {"pools.p.scheduler.type": "single"})
    assert single.pools["p"].scheduler.type == "single"
    tuned = with_values(plain, {"pools.p.scheduler.max_num_batched_tokens": 4096})
    with pytest.raises(sim.ScenarioError, match="max_num_batched_tokens"):
        with_values(tuned, {"pools.p.scheduler.type": "single"})


def test_size_measures_a_prefill_pool_by_the_requests_it_prefilled_and_skips_idle_ones():
    """A disaggregated model's requests end on the decode pool: sizing its prefill pool
    found none of its own and reported 'SLOs not met with 64 replicas'; a pool no stream
    reaches (allowed) failed the same way. Now the prefill pool is judged by the requests
    it prefilled, and an idle pool needs 0 replicas."""
    from sim.planning.size import size
    from sim.config.slos import parse_slo
    scenario = sim.with_overrides(sim.load_scenario(ROOT / "scenarios" / "disaggregated.yaml"),
                                  duration_s=30)
    table = size(scenario, [parse_slo("ttft_p99=5s")]).set_index("pool")
    assert table.loc["prefill", "feasible"] and table.loc["prefill", "replicas"] >= 1
    assert table.loc["prefill", "ttft_p99"] < 5.0
    idle = table.loc["colocated"]
    assert idle["replicas"] == 0 and idle["feasible"] and "idle" in idle["note"]


def test_size_keeps_an_idle_pool_at_its_sizing_floor_and_prices_it():
    """A pool no request reaches, with sizing.min_replicas: 2 kept for redundancy, was
    reported at 0 replicas and $0/h whatever its floor; now at 2 replicas of its own
    option, paid for at its price."""
    from sim.config.resolve import resolve
    from sim.config.slos import parse_slo
    from sim.config.overrides import with_values
    from sim.planning.size import size
    scenario = sim.with_overrides(sim.load_scenario(ROOT / "scenarios" / "disaggregated.yaml"),
                                  duration_s=10)
    floored = with_values(scenario, {"pools.colocated.sizing": {"max_replicas": 8,
                                                                 "min_replicas": 2}})
    row = size(floored, [parse_slo("ttft_p99=5s")], pools=["colocated"]).iloc[0]
    cfg = floored.pools["colocated"]
    gpus = 2 * cfg.tp * cfg.pp
    price = resolve(floored)[0].pools["colocated"].price_per_gpu_hour
    assert (row["replicas"], row["gpus"], row["feasible"]) == (2, gpus, True)
    assert row["cost_usd_per_h"] == pytest.approx(gpus * price) and price > 0
    assert "sizing.min_replicas: 2" in row["note"]


def test_max_rate_is_a_multiple_of_the_scenarios_own_load():
    """A scenario at rate_scale 4 of 4/s and one at 16/s are the same load: max_rate gave
    the first 4x the requests per second (its trials overwrote rate_scale, and the answer
    was then multiplied by the scaled rate)."""
    from sim.config.overrides import with_values
    from sim.planning.size import max_rate
    from sim.config.slos import parse_slo
    slos = [parse_slo("ttft_p99=1s")]
    scaled = with_values(chat(duration=20, rate=4), {"workload.rate_scale": 4})
    plain = chat(duration=20, rate=16)
    a, b = max_rate(scaled, slos, "p"), max_rate(plain, slos, "p")
    assert a["rate_scale"] == b["rate_scale"]
    assert a["requests_per_s"] == pytest.approx(b["requests_per_s"], rel=0.1)


def test_replications_give_each_slo_the_share_of_seeds_that_met_it():
    from sim.planning.stats import slo_met_share
    verdict = lambda ok: {"slo": {"met": ok, "fleet": {"met": ok, "objectives": {
        "ttft_p99": {"met": ok, "margin": 0.1 if ok else -0.2}}}}}
    share = slo_met_share([verdict(True), verdict(False), verdict(True), verdict(True)])
    assert share == {"slo": 0.75, "fleet": 0.75, "fleet.objectives.ttft_p99": 0.75}
    margins = aggregate([verdict(False), verdict(False)])["slo.fleet.objectives.ttft_p99.margin"]
    assert margins["mean"] == pytest.approx(-0.2) and margins["ci95_low"] == pytest.approx(-0.2)


def test_a_name_holding_dots_is_one_key_of_an_override_path():
    """A pool named 'a.b' (a valid name) had no --set spelling, and size and check failed
    on their own overrides ('no field a at pools')."""
    from sim.config.overrides import split_path, with_values
    from sim.planning.size import size
    from sim.config.slos import parse_slo
    data = {"pools": {"a.b": {"replicas": 1}, "a": {"replicas": 1}}}
    assert split_path(data, "pools.a.b.replicas") == ["pools", "a.b", "replicas"]
    assert split_path(data, "pools.a.replicas") == ["pools", "a", "replicas"]
    base = chat(duration=20, rate=2).model_dump(mode="json")
    base["pools"] = {"a.b": base["pools"]["p"]}
    scenario = Scenario.model_validate(base)
    assert with_values(scenario, {"pools.a.b.replicas": 3}).pools["a.b"].replicas == 3
    table = size(scenario, [parse_slo("ttft_p99=10s")])
    assert table.loc[0, "pool"] == "a.b" and table.loc[0, "feasible"]


def test_size_and_check_handle_a_spot_pool_and_a_cold_start():
    """A spot pool sized at a fixed count lost its preempted replicas for good, and a
    pool's cold start without its autoscaler was refused: size on spot-fleet.yaml and check
    --update on v3-gateway.yaml failed on their own overrides. A spot pool's count is now
    held by a one-row schedule that replaces what preemptions take."""
    from sim.planning.size import min_replicas
    from sim.config.slos import parse_slo
    from sim.config.overrides import with_values
    scenario = sim.with_overrides(sim.load_scenario(ROOT / "scenarios" / "spot-fleet.yaml"),
                                  duration_s=300)
    spot = [p for p, cfg in scenario.pools.items()
            if cfg.spot is not None and cfg.spot.preemptions_per_hour > 0]
    assert spot
    # about five preemptions per replica over the run: a count not held would fall fast
    scenario = with_values(scenario, {f"pools.{spot[0]}.spot.preemptions_per_hour": 60})
    cfg = scenario.pools[spot[0]]
    option = {"hardware": cfg.hardware, "tp": cfg.tp, "weight_dtype": cfg.weight_dtype}
    n, trials = min_replicas(scenario, spot[0], [parse_slo("ttft_p99=60s")], option, 8)
    assert n is not None and trials[n].ok and len(trials) >= 3
    for count, trial in trials.items():
        held = trial.summary["pools"][spot[0]]
        assert held["replicas_max"] == count and held["replicas_mean"] > 0.9 * count
    v3 = sim.with_overrides(sim.load_scenario(ROOT / "scenarios" / "v3-gateway.yaml"),
                            duration_s=30)
    assert any(c.autoscaler is not None for c in v3.pools.values())
    table = size(v3, [parse_slo("ttft_p99=600s")])
    assert table.feasible.all()


def test_size_refuses_a_search_past_its_budget_before_simulating(tmp_path, capsys):
    """60 options of up to 20,000 replicas ran for minutes with no end in sight; the worst
    case is now bounded up front and the error names the sizing block and the ways out."""
    import yaml
    from sim.planning.budget import search_bound
    assert search_bound(1) == (1, 1)
    assert search_bound(64) == (12, 1 + 2 + 4 + 8 + 16 + 32 + 64 + 5 * 64)
    data = chat(duration=20, rate=2).model_dump(mode="json")
    data["pools"]["p"]["sizing"] = {"hardware": ["H100-SXM", "H200", "A100-80GB"],
                                    "tp": [1, 2, 4, 8], "weight_dtype": ["bf16", "fp8"],
                                    "max_replicas": 20000}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["size", str(path), "--slo", "ttft_p99=1s", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "pools.p.sizing" in err and "24 option(s)" in err and "max_replicas" in err


def test_size_refuses_a_scenario_whose_streams_drew_no_request(tmp_path, capsys):
    """A low rate over a short window may draw no request: no load, so nothing to size
    (the pool read as idle capacity, and --max-rate said the SLOs were missed)."""
    import yaml
    import sim
    from sim.config.scenario import Scenario
    for seed in range(20):          # 0.5 expected arrivals: most seeds draw none
        data = chat(duration=10, rate=0.05).model_dump(mode="json")
        data["seed"] = seed
        try:
            sim.run(Scenario.model_validate(data))
        except sim.ScenarioError as exc:      # a run that draws nothing is refused too
            assert "no stream draws a request over the run" in str(exc)
            break
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    for extra in ([], ["--max-rate"]):
        assert main(["size", str(path), "--slo", "ttft_p99=1s", "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert "no stream draws a request over the run" in err, err


def test_max_rate_moves_the_load_by_its_step_and_takes_the_verdicts_at_hand(monkeypatch):
    """With a stub verdict met up to 1.3x: max_rate multiplies the load by ``step`` (1.25)
    until it is bracketed, then bisects to 1.3 within 2%; the verdict at 1x handed to it is
    taken as it is (never run again), and every verdict it tried is left in the dict."""
    from sim.planning import size as size_mod
    from sim.planning.trial import Observed
    from sim.planning.verdict import Verdict
    scenario = chat(duration=20, rate=4)
    arrived = {"requests": {"arrived": 80}}

    def stub(scn, pool, slos, confidence, **_):
        scale = scn.workload.rate_scale
        tried.append(scale)
        return Verdict(scale <= 1.3, None, 1, {}, first=Observed(arrived, 1.0))

    tried: list[float] = []
    monkeypatch.setattr(size_mod, "verdict", stub)
    given = Verdict(True, None, 1, {}, first=Observed(arrived, 1.0))
    verdicts = {1.0: given}
    row = size_mod.max_rate(scenario, [parse_slo("ttft_p99=1s")], "p", step=1.25,
                            verdicts=verdicts)
    assert 1.0 not in tried and tried[:2] == [1.25, 1.5625]
    assert 1.3 * 0.98 <= row["rate_scale"] <= 1.3
    assert row["requests_per_s"] == pytest.approx(row["rate_scale"] * 80 / 20)
    assert verdicts[1.0] is given and set(verdicts) == {1.0, *tried}
