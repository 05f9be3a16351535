"""A newcomer's first hour, as the commands a planner types: a scenario written from
scratch, run, sized, the chosen fleet written and run, checked in CI, swept and compared
with the failing first try, and a closed-loop benchmark read over its own span. Each
step's output is asserted as a planner would read it: a wrong number in any of them
(a unit, a window, a dtype, an unexplained failure) fails the tour."""
from __future__ import annotations

import csv
import json
import re

import pytest
import yaml

from sim.cli import main

PLAN = """\
name: plan
seed: 7
duration: 60s
workload:
  streams:
    chat:
      team: search
      model: llama-3.1-8b
      arrival: {type: poisson, rate: 40/s}
      prompt_tokens: {type: lognormal, mean: 1000, cv: 1.0, max: 8000}
      output_tokens: {type: lognormal, mean: 250, cv: 1.0, max: 2000}
pools:
  main:
    model: llama-3.1-8b
    hardware: H100-SXM
    tp: 1
    replicas: 1
    sizing: {weight_dtype: [bf16, fp8], max_replicas: 8}
slos:
  ttft_p99: 2s
  tpot_p99: 50ms
"""

# a fixed-concurrency benchmark (vLLM's bench serve --max-concurrency 16) inside a
# half-hour window it finishes long before
BENCHMARK = """\
name: bench
seed: 3
duration: 30min
workload:
  streams:
    bench:
      team: perf
      model: llama-3.1-8b
      arrival: {type: closed, concurrency: 16, requests: 300}
      prompt_tokens: {type: fixed, value: 512}
      output_tokens: {type: fixed, value: 128}
pools:
  main: {model: llama-3.1-8b, hardware: H100-SXM, tp: 1, replicas: 1}
"""

RATE = "workload.streams.chat.arrival.rate"


def _fleetsim(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _summary(folder) -> dict:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))


@pytest.fixture()
def tour(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.yaml").write_text(PLAN, encoding="utf-8")
    (tmp_path / "bench.yaml").write_text(BENCHMARK, encoding="utf-8")
    return tmp_path


def test_a_newcomers_first_hour(tour, capsys):
    # 1. the scenario written from scratch is valid; an SLO without its unit is not
    code, out, _ = _fleetsim(capsys, "lint", "plan.yaml")
    assert code == 0 and "plan.yaml: ok" in out
    code, _, err = _fleetsim(capsys, "size", "plan.yaml", "--slo", "tpot_p99=50")
    assert code == 2 and "50 has no unit" in err and "50ms" in err and "50s" in err

    # 2. the first try: one GPU misses both SLOs, and says so
    code, out, _ = _fleetsim(capsys, "run", "plan.yaml", "--out", "before", "--no-report")
    assert code == 0 and "SLOs: MISSED" in out
    before = _summary(tour / "before")
    assert before["slo"]["met"] is False
    span = before["throughput"]
    assert span["window"] == "active_span"
    assert span["requests_per_s"] == pytest.approx(
        before["requests"]["completed"] / span["span_s"], rel=1e-9)

    # 3. size names every option in full and writes the cheapest as a scenario
    code, out, _ = _fleetsim(capsys, "size", "plan.yaml", "--out", "sized", "--quiet",
                             "--write-scenario", "chosen.yaml")
    assert code == 0
    rows = list(csv.DictReader((tour / "sized" / "size.csv").open(encoding="utf-8")))
    assert {(r["weight_dtype"], r["kv_dtype"]) for r in rows} == {("bf16", "bf16"),
                                                                  ("fp8", "bf16")}
    assert all(r["engine"] == "vllm" and r["cost_model"] for r in rows)
    said = re.search(r"wrote chosen\.yaml: pool main: (\d+) x H100-SXM tp1 pp1, "
                     r"(\w+) weights, (\w+) KV cache", out)
    assert said, out
    replicas, weights, kv = int(said[1]), said[2], said[3]
    assert replicas > 1 and kv == "bf16"        # fp8 weights keep the pool's bf16 cache

    # 4. the written fleet, run as it stands, is the fleet size described and meets the SLOs
    code, out, _ = _fleetsim(capsys, "run", "chosen.yaml", "--out", "after", "--no-report")
    assert code == 0 and "SLOs: all met" in out
    pool = _summary(tour / "after")["pools"]["main"]
    assert (pool["replicas_max"], pool["weight_dtype"], pool["kv_dtype"]) == (
        replicas, weights, kv)

    # 5. CI: a baseline of the fleet passes; a --set it was not made with is refused; more
    # traffic in the scenario fails, saying what and by how much
    code, _, err = _fleetsim(capsys, "check", "chosen.yaml", "--baseline", "base.json",
                             "--update")
    assert code == 0 and "warning" not in err.lower()
    code, out, _ = _fleetsim(capsys, "check", "chosen.yaml", "--baseline", "base.json")
    assert code == 0 and "chosen.yaml: ok" in out
    code, out, _ = _fleetsim(capsys, "check", "chosen.yaml", "--baseline", "base.json",
                             "--set", f"{RATE}=80/s")   # not the baseline's traffic: said so
    assert code == 1 and f"--set differs from the baseline's (--set {RATE}=80/s against " \
        "no --set)" in out
    written = (tour / "chosen.yaml").read_text(encoding="utf-8")
    busier = yaml.safe_load(written)
    busier["workload"]["streams"]["chat"]["arrival"]["rate"] = "80/s"
    (tour / "chosen.yaml").write_text(yaml.safe_dump(busier), encoding="utf-8")
    code, out, _ = _fleetsim(capsys, "check", "chosen.yaml", "--baseline", "base.json")
    (tour / "chosen.yaml").write_text(written, encoding="utf-8")
    assert code == 1
    assert "breaks the SLOs as configured" in out and "ttft_p99" in out
    assert "over its target 2.00 s (baseline" in out
    needed = re.search(rf"required replicas {replicas} -> (\d+)", out)
    assert needed and int(needed[1]) > replicas, out

    # 6. a sweep over the rate agrees: met at the sized rate and below, missed at double
    code, _, _ = _fleetsim(capsys, "sweep", "chosen.yaml", "--vary",
                           f"{RATE}=20/s,40/s,80/s", "--out", "sweep.csv", "--quiet")
    assert code == 0
    table = list(csv.DictReader((tour / "sweep.csv").open(encoding="utf-8")))
    assert [r["slo_met"] for r in table] == ["True", "True", "False"]

    # 7. compare takes the failing first try and shows what changed in the fleet
    code, out, _ = _fleetsim(capsys, "compare", "before", "after")
    assert code == 0
    assert re.search(r"slo_met\s+MISSED\s+met\s.*better", out), out
    assert re.search(rf"main\.weight_dtype\s+bf16\s+{weights}", out), out
    assert re.search(rf"main\.replicas_max\s+1\s+{replicas}\s.*differs", out), out


def test_a_closed_loop_benchmark_is_read_over_its_own_span(tour, capsys):
    """300 requests at concurrency 16 end within a minute or two of a half-hour window:
    throughput and cost per token are over that span (as vLLM's bench serve reports
    them), not over the half hour the fleet stays up."""
    code, out, _ = _fleetsim(capsys, "run", "bench.yaml", "--out", "bench", "--no-report")
    assert code == 0
    s = _summary(tour / "bench")
    span = s["throughput"]
    assert s["requests"]["completed"] == 300
    assert span["span_s"] < s["duration_s"] / 10
    assert span["requests_per_s"] == pytest.approx(300 / span["span_s"], rel=0.01)
    whole = s["throughput_whole_run"]["requests_per_s"]
    assert span["requests_per_s"] > 10 * whole
    per_m = s["cost"]["usd_per_million_output_tokens"]
    assert per_m < s["cost"]["usd_per_million_output_tokens_whole_run"] / 10
    assert "active span" in out
