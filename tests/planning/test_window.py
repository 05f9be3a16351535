"""`fleetsim size --window`: trials over a short stretch of a stationary load give the
answer of the whole run; a load that is not stationary is refused."""
from __future__ import annotations

import math

import pytest
import yaml

from sim.cli import main
from sim.config.slos import parse_slo
from sim.planning.size import size
from sim.planning.window import stationary_problem, windowed

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


@pytest.mark.parametrize("extra, fragment", [
    (["--window", "5s"], "rate is sinusoidal"),
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


def test_a_window_not_shorter_than_the_run_exits_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=6).model_dump(mode="json")))
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--window", "30s"]) == 2
    assert "is not shorter than the run" in capsys.readouterr().err
