"""`fleetsim size` and `size --max-rate` against answers known in closed form, with
confident verdicts, and the same table however many processes search it."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from sim.cli import main
from sim.config import profiles
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.planning.size import max_rate, size
from sim.planning.verdict import Confidence

from tests.planning.test_planning import chat

PROMPT = 2048


def prefill_s() -> float:
    """Service time of one request of the known-answer pools: a 2,048-token prompt and
    one output token, served in one prefill step (the roofline's, no front end)."""
    cost = RooflineCostModel(profiles.find_model("llama-3.1-8b"),
                             profiles.find_hardware("H100-SXM"), 1, "bf16", "bf16",
                             RooflineConfig())
    return cost.step_scalar(PROMPT, 1, PROMPT * PROMPT / 2, 0)[0]


def one_at_a_time(arrival: dict, duration_s: float, warmup_s: float, seed: int = 1,
                  replicas: int = 1, router: str = "round_robin", max_replicas: int = 16
                  ) -> Scenario:
    return Scenario.model_validate({
        "name": "known", "seed": seed, "duration": duration_s, "warmup": warmup_s,
        "drain": 10 * duration_s,
        "workload": {"streams": {"q": {"model": "llama-3.1-8b", "arrival": arrival,
                                       "prompt_tokens": PROMPT, "output_tokens": 1}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM",
                        "replicas": replicas, "router": {"type": router},
                        "scheduler": {"type": "single"},
                        # every request one step of S: the roofline's own host terms,
                        # added (a synchronous engine), no front end
                        "cost_model": {"type": "roofline", "step_overhead": 1e-3},
                        "engine": "vllm@v1", "front_end": 0, "sizing": {"max_replicas": max_replicas}}},
    })


def test_step_time_of_the_known_answer_request_is_one_prefill():
    """The closed forms below rest on every request taking exactly one step of S."""
    import sim
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": 0.2 / s, "cv": 0.001}, 200 * s, 0)
    e2e = sim.run(scn).requests["e2e_s"].to_numpy()
    assert len(e2e) > 30 and e2e == pytest.approx(s, rel=1e-9)


@pytest.mark.parametrize("load", [5.5, 2.3])
def test_size_finds_the_server_count_of_an_evenly_spaced_stream(load):
    """Requests evenly spaced at rate λ, each served alone in S, dealt round robin over k
    servers: each server sees a gap of k/λ, so none ever waits when k > λS and every
    server's queue grows without end when k < λS. The fewest servers keeping e2e p99
    within 1.5 S is therefore ceil(λS); size finds it, surely, at 95%."""
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": load / s, "cv": 0.001}, 300 * s, 20 * s)
    slos = [parse_slo(f"e2e_p99={1.5 * s}s")]
    table = size(scn, slos, confidence=Confidence(0.95, 6))
    row = table.iloc[0]
    assert row.replicas == math.ceil(load)
    assert row.confident and row.replications == 3
    assert row.e2e_p99 == pytest.approx(s, rel=1e-6)
    assert row.e2e_p99_low <= row.e2e_p99 <= row.e2e_p99_high <= 1.5 * s


def test_max_rate_of_a_single_server_matches_the_md1_mean_wait():
    """One server, Poisson arrivals, a deterministic service S (M/D/1): the mean wait is
    W = ρS / (2(1 − ρ)), so W <= S holds up to ρ = 2/3. From a base load of ρ = 0.4,
    max_rate with replicated verdicts answers 2/3 / 0.4 = 1.667x within 5%."""
    s = prefill_s()
    scn = one_at_a_time({"type": "poisson", "rate": 0.4 / s}, 4000 * s, 200 * s,
                        router="least_outstanding")
    row = max_rate(scn, [parse_slo(f"queue_mean={s}s")], "p",
                   confidence=Confidence(0.95, 6))
    assert row["rate_scale"] == pytest.approx((2 / 3) / 0.4, rel=0.05)
    assert row["requests_per_s"] == pytest.approx(row["rate_scale"] * 0.4 / s, rel=0.05)
    assert 3 <= row["replications"] <= 6 and "confident" in row


def test_parallel_and_serial_sizing_give_the_same_table():
    """Each option is searched on its own, so two processes give the table one does,
    replication counts and intervals included."""
    scenario = chat(duration=30, rate=10)
    slos = [parse_slo("ttft_p99=0.5s"), parse_slo("tpot_p99=40ms")]
    conf = Confidence(0.95, 3)
    serial = size(scenario, slos, confidence=conf)
    parallel = size(scenario, slos, confidence=conf, workers=2)
    pd.testing.assert_frame_equal(serial, parallel)
    assert set(serial.hardware) == {"H100-SXM", "H200"}
    assert (serial.replications == 3).all()


def test_size_with_confidence_gives_each_slo_its_interval(tmp_path, capsys):
    """size --confidence writes the estimate, its interval, the replications and whether
    the verdicts either side of the answer were sure; without it none of those."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=6).model_dump(mode="json")))
    out = tmp_path / "sized"
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--quiet", "--confidence", "95%",
                 "--max-replications", "3", "--workers", "2", "--out", str(out)]) == 0
    rows = json.loads((out / "size.json").read_text())
    for row in rows:
        assert row["replications"] == 3 and isinstance(row["confident"], bool)
        assert row["ttft_p99_low"] <= row["ttft_p99"] <= row["ttft_p99_high"]
    capsys.readouterr()
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--quiet"]) == 0
    assert "replications" not in capsys.readouterr().out


def test_check_with_confidence_records_whether_each_count_is_sure(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=6).model_dump(mode="json")))
    baseline = tmp_path / "baseline.json"
    args = ["check", str(path), "--baseline", str(baseline), "--slo", "ttft_p99=2s",
            "--confidence", "0.9", "--max-replications", "3"]
    assert main(args + ["--update"]) == 0
    entry = next(iter(json.loads(baseline.read_text()).values()))
    assert isinstance(entry["pools"]["p"]["confident"], bool)
    assert main(args) == 0


@pytest.mark.parametrize("argv, fragment", [
    (["--max-replications", "5"], "give --confidence too"),
    (["--confidence", "2"], "from 50% to 99.99%"),
    (["--confidence", "95%", "--max-replications", "2"], "at least 3 replications"),
    (["--max-rate", "--workers", "2"], "--max-rate searches one load at a time"),
    (["--scheduler", "tcp://x:1"], "add --executor dask"),
])
def test_bad_confidence_and_executor_arguments_exit_2(argv, fragment, capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=10, rate=2).model_dump(mode="json")))
    try:
        code = main(["size", str(path), "--slo", "ttft_p99=2s", *argv])
    except SystemExit as exc:           # argparse's own refusal of a value
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_growing_to_the_flow_bound_finds_the_same_count_in_fewer_trials():
    """Evenly spaced requests at λS = 20.5 on servers taking one at a time: one server
    completes about 1/20.5 of the load, so the search goes straight to the flow bound
    (about 19) instead of doubling from 1, and finds the same answer, ceil(λS) = 21,
    with fewer simulations."""
    from sim.planning.size import min_replicas
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": 20.5 / s, "cv": 0.001}, 300 * s, 20 * s,
                        max_replicas=64)
    slos = [parse_slo(f"e2e_p99={1.5 * s}s")]
    option = {"hardware": "H100-SXM", "tp": 1, "weight_dtype": "bf16"}
    plain, plain_trials = min_replicas(scn, "p", slos, option, 64, estimate=False)
    quick, quick_trials = min_replicas(scn, "p", slos, option, 64)
    assert plain == quick == 21
    assert sorted(plain_trials)[:5] == [1, 2, 4, 8, 16]
    assert 18 <= sorted(quick_trials)[1] <= 20             # the flow bound, just under it
    assert len(quick_trials) < len(plain_trials) - 2


def test_the_search_starts_at_the_sizing_floor():
    """sizing.min_replicas: 6 on the λS = 2.3 stream (3 servers suffice): no count under 6
    is tried and the answer is the floor; with a floor of 2 the answer is still 3."""
    from sim.config.overrides import with_values
    from sim.planning.size import min_replicas
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": 2.3 / s, "cv": 0.001}, 100 * s, 10 * s)
    slos = [parse_slo(f"e2e_p99={1.5 * s}s")]
    option = {"hardware": "H100-SXM", "tp": 1, "weight_dtype": "bf16"}
    for floor, answer in ((6, 6), (2, 3)):
        floored = with_values(scn, {"pools.p.sizing.min_replicas": floor})
        found, trials = min_replicas(floored, "p", slos, option, 16)
        assert found == answer and min(trials) == floor


def test_the_room_a_percentile_leaves_is_numpys():
    """room(n, q) values above a bound push numpy's linear percentile above it, whatever
    the values; one fewer, just above it, leave the percentile within a hair of it."""
    import numpy as np
    from sim.planning.hopeless import room
    for n in (1, 2, 7, 100, 101, 1000):
        for q in (50, 90, 99):
            k = room(n, q)
            above = np.r_[np.zeros(n - k), np.full(k, 2.0)]
            assert np.percentile(above, q) > 1.0
            if k > 1:
                fewer = np.r_[np.zeros(n - k + 1), np.full(k - 1, 1.0 + 1e-9)]
                assert np.percentile(fewer, q) <= 1.0 + 1e-9


@pytest.mark.parametrize("metric", ["e2e_p99", "ttft_p90", "attainment"])
def test_a_trial_missed_for_good_is_given_up_and_the_answer_is_unchanged(metric):
    """Servers too few for the load fall behind from the start: the watch ends their runs
    well before the window closes, each a miss the full run confirms, while the counts
    that keep up run to the end; the answer is the one full runs give."""
    from sim.planning.size import min_replicas
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": 5.5 / s, "cv": 0.001}, 300 * s, 20 * s)
    slo = parse_slo("attainment=0.95") if metric == "attainment" else \
        parse_slo(f"{metric}={1.5 * s}s")
    slos = [slo, parse_slo(f"e2e_p50={1.5 * s}s")] if metric == "attainment" else [slo]
    option = {"hardware": "H100-SXM", "tp": 1, "weight_dtype": "bf16"}
    full, full_trials = min_replicas(scn, "p", slos, option, 16, give_up=False)
    quick, quick_trials = min_replicas(scn, "p", slos, option, 16)
    assert full == quick == 6
    given_up = [n for n, t in quick_trials.items() if t.verdict.first.given_up]
    assert given_up and all(n < 6 for n in given_up)
    for n in given_up:
        assert quick_trials[n].summary["end_s"] < 0.5 * scn.duration
        assert not full_trials.get(n, quick_trials[n]).ok
    for n, t in quick_trials.items():
        if n in full_trials:
            assert t.ok == full_trials[n].ok


def test_replications_for_a_confident_verdict_are_never_given_up():
    """A run given up knows only that its figure is above the target, while a confident
    verdict averages each run's figure: its replications run whole, so a seed that
    misses does not outweigh those that meet (an infinite stand-in would)."""
    from sim.planning.size import min_replicas
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": 5.5 / s, "cv": 0.001}, 300 * s, 20 * s)
    option = {"hardware": "H100-SXM", "tp": 1, "weight_dtype": "bf16"}
    _, trials = min_replicas(scn, "p", [parse_slo(f"e2e_p99={1.5 * s}s")], option, 16,
                             Confidence(0.95, 3))
    assert not any(t.verdict.first.given_up for t in trials.values())
    assert all(t.summary["end_s"] >= scn.duration for t in trials.values())


def test_at_the_same_price_the_option_with_more_headroom_is_chosen():
    """Two options at the same cost per hour (bf16 and fp8 weights on two GPUs each): the
    one with the wider SLO margin (fp8's faster steps) is the answer and heads the table,
    where the first listed had been taken whatever its margin."""
    from sim.planning.chosen import by_cost, chosen_rows
    table = pd.DataFrame([
        {"pool": "main", "weight_dtype": "bf16", "feasible": True, "replicas": 2,
         "cost_usd_per_h": 5.9, "slo_margin_min": 0.27},
        {"pool": "main", "weight_dtype": "fp8", "feasible": True, "replicas": 2,
         "cost_usd_per_h": 5.9, "slo_margin_min": 0.55},
        {"pool": "main", "weight_dtype": "int4", "feasible": True, "replicas": 3,
         "cost_usd_per_h": 8.85, "slo_margin_min": 0.9}])
    assert chosen_rows(table)["main"]["weight_dtype"] == "fp8"
    assert list(by_cost(table, "pool", "feasible")["weight_dtype"]) == ["fp8", "bf16", "int4"]
