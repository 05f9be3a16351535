"""`size --peak DURATION`: the busiest window of a non-stationary load (from the rate
functions and trace timestamps, in closed form where there is one), sizing there, and
the chosen fleet confirmed over the whole run."""
from __future__ import annotations

import json
import math

import pytest
import yaml

from sim.cli import main
from sim.config.scenario import Scenario
from sim.planning.peak import busiest_window, peak_windowed

from tests.planning.test_autoscaled import diurnal

PERIOD_S = 1200.0


def day(phase_s: float = 0.0) -> dict:
    """The diurnal load of the autoscaling tests (a sinusoid of mean 16/s and amplitude
    10/s beside a constant 5/s) over one period, on a fixed pool to size."""
    data = diurnal().model_dump(mode="json")
    data["duration"] = PERIOD_S
    rate = data["workload"]["streams"]["a"]["arrival"]["rate"]
    rate.update(period=PERIOD_S, phase=phase_s)
    pool = data["pools"]["p"]
    pool["autoscaler"] = None
    del pool["cold_start"]
    pool["sizing"] = {"max_replicas": 6}
    return data


@pytest.mark.parametrize("phase_s", [0.0, 150.0])
def test_theory_the_busiest_window_of_a_sinusoid_is_centred_on_its_crest(phase_s):
    """rate(t) = m + A sin(2π(t − φ)/P) peaks at φ + P/4; a window of D holding the most
    arrivals is centred there: it starts at φ + P/4 − D/2, and holds
    m D + (A P / π) sin(π D / P) of the sinusoid's arrivals, plus 5 D of the constant
    stream's."""
    window_s = 120.0
    start_s, count = busiest_window(Scenario.model_validate(day(phase_s)), window_s)
    assert start_s == pytest.approx(phase_s + PERIOD_S / 4 - window_s / 2, abs=1e-3)
    expected = 16 * window_s + 10 * PERIOD_S / math.pi * math.sin(math.pi * window_s /
                                                                  PERIOD_S) + 5 * window_s
    assert count == pytest.approx(expected, rel=1e-9)


def test_the_busiest_window_of_a_trace_starts_at_its_burst(tmp_path):
    """A trace of one request a second with ten in the second after t = 50: the busiest
    5 s window starts at the burst's first request."""
    times = [float(t) for t in range(100)] + [50.0 + i / 10 for i in range(1, 10)]
    (tmp_path / "t.csv").write_text("timestamp,prompt_tokens,output_tokens\n" + "".join(
        f"{t},100,10\n" for t in sorted(times)))
    data = day()
    data["duration"] = 100.0
    data["workload"]["streams"] = {"t": {"model": "llama-3.1-8b",
                                         "arrival": {"type": "trace", "path": "t.csv"}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    import sim
    start_s, count = busiest_window(sim.load_scenario(path), 5.0)
    assert (start_s, count) == (46.0, 14.0)      # 46..50 and the burst's 9: [46, 51)


def test_trials_simulate_the_window_after_a_lead_and_judge_its_arrivals():
    """A trial's run ends with the window, its warm-up moved to the window's start, its
    rate streams starting a minute (the least lead) before it."""
    scenario = Scenario.model_validate(day())
    cut, found = peak_windowed(scenario, 120.0, frozenset({"p"}))
    assert found["window_start_s"] == pytest.approx(240.0, abs=1e-3)
    assert cut.duration == pytest.approx(360.0) and cut.warmup == pytest.approx(240.0)
    assert [s.start for s in cut.workload.streams.values()] == pytest.approx([180.0, 180.0])


def test_size_peak_sizes_at_the_crest_and_confirms_over_the_whole_run(tmp_path, capsys):
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(day()))
    out = tmp_path / "sized"
    code = main(["size", str(path), "--slo", "ttft_p99=2s", "--peak", "2min", "--quiet",
                 "--out", str(out)])
    printed = capsys.readouterr()
    peak = json.loads((out / "peak.json").read_text())
    assert peak["window_start_s"] == pytest.approx(240.0, abs=1e-3)
    assert "the busiest window is [240 s, 360 s)" in printed.out
    (confirmed,) = peak["confirmed"]
    assert confirmed["pool"] == "p" and "ttft_p99" in confirmed
    verdict = "meets the SLOs" if confirmed["met"] else "MISSES the SLOs"
    assert f"--peak: confirmed over the whole run: pool p {verdict}" in printed.out
    assert code == (0 if confirmed["met"] else 1)


@pytest.mark.parametrize("change, extra, fragment", [
    (lambda d: d["workload"]["streams"]["b"].update(
        arrival={"type": "closed", "concurrency": 4}), [], "closed-loop"),
    (lambda d: None, ["--peak", "20min"], "not shorter than the run"),
    (lambda d: None, ["--window", "60s"], "leave out --window"),
])
def test_peak_where_it_cannot_apply_exits_2(change, extra, fragment, tmp_path, capsys):
    data = day()
    change(data)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    argv = ["size", str(path), "--slo", "ttft_p99=2s", "--quiet"]
    argv += extra if "--peak" in extra else ["--peak", "2min", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--peak" in err and fragment in err and "Traceback" not in err


def test_a_confirmation_that_fails_is_said_and_exits_1(tmp_path, capsys, monkeypatch):
    """Where the fleet sized at the peak misses the SLOs over the whole run (here the
    confirmation's verdict stubbed to a miss), size says so and exits 1."""
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(day()))
    monkeypatch.setattr("sim.planning.peak.confirm", lambda *a: [
        {"pool": "p", "met": False, "ttft_p99": 9.5, "margin_ttft_p99": -3.75}])
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--peak", "2min",
                 "--quiet"]) == 1
    printed = capsys.readouterr()
    assert "pool p MISSES the SLOs (ttft_p99 9.5)" in printed.out
    assert "misses the SLOs over the whole run for pool(s) p" in printed.err


def test_a_stream_that_ended_before_the_lead_is_left_out_of_the_trials(tmp_path, capsys):
    """A stream that stopped (end: 10min) long before the peak of another (from 100 min)
    once had its start moved past its end, and size refused the scenario blaming a field
    the user never set; it is now left out of the trials (with the SLO block of its own),
    and the whole-run confirmation runs it."""
    stream = {"model": "llama-3.1-8b", "prompt_tokens": 200, "output_tokens": 20}
    data = day()
    data["duration"] = 7200.0
    data["workload"]["streams"] = {
        "early": {**stream, "arrival": {"type": "poisson", "rate": 2}, "end": "10min"},
        "late": {**stream, "arrival": {"type": "poisson", "rate": 4}, "start": "100min"}}
    data["slos"] = {"streams": {"early": {"ttft_p99": "2s"}}}
    cut, found = peak_windowed(Scenario.model_validate(data), 300.0, frozenset({"p"}))
    assert list(cut.workload.streams) == ["late"] and cut.slos is None
    assert found["streams_left_out"] == ["early"]
    assert cut.workload.streams["late"].start == 6000.0      # its own, after the lead
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "sized"
    code = main(["size", str(path), "--slo", "ttft_p99=2s", "--peak", "5min", "--quiet",
                 "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "stream(s) early ended before the lead" in printed.out
    (confirmed,) = json.loads((out / "peak.json").read_text())["confirmed"]
    assert confirmed["met"]
