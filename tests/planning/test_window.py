"""`fleetsim size --window`: trials over a short stretch of a stationary load give the
answer of the whole run; a load that is not stationary is refused."""
from __future__ import annotations

import math

import pytest
import yaml

from sim.cli import main
from sim.config.slos import parse_slo
from sim.planning.size import size
from sim.planning.window import (MIN_WINDOW_S, TAIL_REQUESTS, auto_window_s, auto_windowed,
                                  stationary_problem, windowed)

from tests.planning.test_planning import chat
from tests.planning.test_sizing import one_at_a_time, prefill_s


@pytest.mark.parametrize("load", [5.5, 2.3])
def test_a_window_of_the_known_answer_stream_finds_the_whole_runs_count(load):
    """The evenly spaced stream of test_sizing (ceil(λS) servers, known in closed form):
    a tenth of its run finds the count the whole run finds."""
    s = prefill_s()
    scn = one_at_a_time({"type": "gamma", "rate": load / s, "cv": 0.001}, 600 * s, 20 * s)
    slos = [parse_slo(f"e2e_p99={1.5 * s}s")]
    short = windowed(scn, 60 * s)
    assert short.duration == pytest.approx(80 * s) and short.warmup == scn.warmup
    whole, part = size(scn, slos), size(short, slos)
    assert whole.iloc[0].replicas == part.iloc[0].replicas == math.ceil(load)


def test_only_a_stationary_load_may_be_windowed():
    assert stationary_problem(chat(duration=20, rate=6)) is None
    sine = chat(duration=20, rate=6).model_dump(mode="json")
    sine["workload"]["streams"]["chat"]["arrival"]["rate"] = {
        "type": "sinusoidal", "mean": 6, "amplitude": 3, "period": 20}
    from sim.config.scenario import Scenario
    assert "rate is sinusoidal" in stationary_problem(Scenario.model_validate(sine))


def test_the_automatic_window_holds_enough_requests_past_the_strictest_percentile():
    """At 6 requests/s, p99 needs 200 / 0.01 = 20,000 requests: 3,333 s; p90 2,000: 333 s;
    a mean counts as p50 (400 requests); a load so heavy that a few seconds would do gets
    the minute's floor; attainment 0.995 counts as p99.5."""
    scn = chat(duration=20, rate=6)
    slo = parse_slo
    assert auto_window_s(scn, [slo("ttft_p99=2s")]) == pytest.approx(20_000 / 6)
    assert auto_window_s(scn, [slo("ttft_p90=2s"), slo("tpot_p50=1s")]) == \
        pytest.approx(TAIL_REQUESTS / 0.1 / 6)
    assert auto_window_s(scn, [slo("ttft_mean=2s")]) == pytest.approx(400 / 6)
    assert auto_window_s(scn, [slo("attainment=0.995")]) == pytest.approx(40_000 / 6)
    busy = chat(duration=20, rate=2000)
    assert auto_window_s(busy, [slo("ttft_p99=2s")]) == MIN_WINDOW_S


def test_the_automatic_window_shortens_only_a_run_longer_than_it():
    slos = [parse_slo("ttft_p90=2s")]
    long = chat(duration=1000, rate=6)
    short, window_s = auto_windowed(long, slos)
    assert window_s == pytest.approx(2_000 / 6)
    assert short.duration == pytest.approx(long.warmup + window_s)
    whole, none = auto_windowed(chat(duration=20, rate=6), slos)
    assert none is None and whole.duration == 20


def test_window_auto_on_the_command_line_says_what_it_simulates(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=100, rate=6).model_dump(mode="json")))
    assert main(["size", str(path), "--slo", "ttft_p50=2s", "--window", "auto"]) == 0
    assert "--window auto: each trial simulates 66.6667 s of arrivals" in \
        capsys.readouterr().out
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--window", "auto"]) == 0
    assert "the SLOs need the whole run" in capsys.readouterr().out


@pytest.mark.parametrize("extra, fragment", [
    (["--window", "5s"], "rate is sinusoidal"),
    (["--window", "auto"], "rate is sinusoidal"),
    (["--window", "5s", "--autoscaled"], "leave out --window"),
])
def test_bad_windows_exit_2(extra, fragment, tmp_path, capsys):
    data = chat(duration=20, rate=6).model_dump(mode="json")
    data["workload"]["streams"]["chat"]["arrival"]["rate"] = {
        "type": "sinusoidal", "mean": 6, "amplitude": 3, "period": 20}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["size", str(path), "--slo", "ttft_p99=2s", *extra]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "--window" in err and "Traceback" not in err


def test_a_window_neither_a_duration_nor_auto_exits_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=6).model_dump(mode="json")))
    with pytest.raises(SystemExit) as done:
        main(["size", str(path), "--slo", "ttft_p99=2s", "--window", "soon"])
    assert done.value.code == 2
    assert "a duration such as 90s, or auto" in capsys.readouterr().err


def test_a_window_not_shorter_than_the_run_exits_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=6).model_dump(mode="json")))
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--window", "30s"]) == 2
    assert "is not shorter than the run" in capsys.readouterr().err
