"""`size` shows its progress per trial from the first second: the trial running (the
option in full), the time elapsed and an estimate of what is left, under --autoscaled
too. Every test here runs on a fake clock: none depends on the machine's speed."""
from __future__ import annotations

import io
import re

import pytest
import yaml

import sim
from sim.cli import main
from sim.cli.trial_progress import CLEAR, TrialLine
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.config.overrides import with_values
from sim.planning.size import size

from tests.planning.test_autoscaled import diurnal

DAY_S = 86_400.0
TRIAL_S = 3_600.0           # each trial of the day-long scenario "takes" an hour


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def day_long(autoscaled: bool) -> dict:
    """The diurnal load over a whole day (its period a day); a fixed pool to size, or
    the autoscaled one."""
    data = diurnal().model_dump(mode="json")
    data["duration"] = DAY_S
    data["workload"]["streams"]["a"]["arrival"]["rate"]["period"] = DAY_S
    if not autoscaled:
        data["pools"]["p"]["autoscaler"] = None
        del data["pools"]["p"]["cold_start"]
        data["pools"]["p"]["sizing"] = {"max_replicas": 4}
    return data


class Stop(Exception):
    pass


def test_the_line_shows_before_the_first_trial_of_a_day_long_scenario_ends(monkeypatch):
    """The first run (the scenario as configured) has not ended, not even started, when
    the line shows: trial 1 of at most N, elapsed 0 s."""
    clock, screen = FakeClock(), Terminal()
    line = TrialLine("size", stream=screen, clock=clock, tick_s=None)
    seen = []

    def first_run(*args, **kwargs):
        seen.append(screen.getvalue())
        raise Stop

    monkeypatch.setattr(sim, "run", first_run)
    with pytest.raises(Stop):
        size(Scenario.model_validate(day_long(False)), [parse_slo("ttft_p99=2s")],
             watch=line)
    assert re.fullmatch(CLEAR.replace("[", r"\[") + r"size: trial 1/≤\d+: the scenario as "
                        r"configured, to find the pools its requests reach \.\.\. "
                        r"elapsed 0 s", seen[0])


def test_each_trial_names_its_option_and_the_estimate_comes_from_the_trials_done():
    clock, screen = FakeClock(), Terminal()
    line = TrialLine("size", stream=screen, clock=clock, tick_s=None)
    option = "pool chat 4 x H100 tp2 pp1 fp8/bf16"
    line(option, 0, 12)
    assert line.text() == f"size: trial 1/≤12: {option} ... elapsed 0 s"
    clock.now_s = 90.0
    line(option, 3, 9)            # 30 s a trial, at most 9 more
    assert line.text() == (f"size: trial 4/≤12: {option} ... elapsed 1 min 30 s, "
                           "about 4 min 30 s left at most")
    clock.now_s = 100.0           # 10 s into the fourth: 20 s of it left, and 8 more
    assert line.text().endswith("elapsed 1 min 40 s, about 4 min 20 s left at most")
    clock.now_s = 150.0           # past the mean: the 8 still to run are left at least
    assert line.text().endswith("elapsed 2 min 30 s, about 4 min 0 s left at most")
    line.stop()
    assert screen.getvalue().endswith(CLEAR) and line.text() == ""


@pytest.mark.parametrize("autoscaled", [False, True])
def test_size_on_the_command_line_shows_each_trial_from_the_first_second(
        autoscaled, tmp_path, monkeypatch, capsys):
    """A day-long diurnal scenario whose every trial takes an hour on the fake clock (the
    runs themselves are of its first ten minutes, to keep the test short): the first
    line shows at 0 s, before any run; each later one names the trial (the option in
    full, or the autoscaler's target and bounds) and estimates what is left from the
    hours the trials took."""
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(day_long(autoscaled)))
    clock = FakeClock()
    monkeypatch.setattr("sim.cli.trial_progress.CLOCK", clock)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    real_run, screens = sim.run, []

    def an_hour_a_trial(scenario, *args, **kwargs):
        import sys
        screens.append(sys.stderr.getvalue())
        clock.now_s += TRIAL_S
        return real_run(with_values(scenario, {"duration": 600.0}), *args, **kwargs)

    monkeypatch.setattr(sim, "run", an_hour_a_trial)
    argv = ["size", str(path), "--slo", "ttft_p99=2s"] + (["--autoscaled"] if autoscaled
                                                           else [])
    assert main(argv) in (0, 1)
    lines = [screen.rsplit(CLEAR, 1)[-1] for screen in screens]
    assert lines[0].endswith("elapsed 0 s") and "trial 1/≤" in lines[0]
    assert len(lines) >= 2
    for k, text in enumerate(lines[1:], start=1):
        assert f"trial {k + 1}/≤" in text
        assert f"elapsed {k} h 0 min, about " in text and "left at most" in text
    for text in lines:          # "≤N" bounds the trials the search ran
        assert int(re.search(r"/≤(\d+):", text).group(1)) >= len(lines)
    named = r"pool p \d+ x H100-SXM tp1 pp1 bf16/bf16" if not autoscaled else \
        r"pool p autoscaler target [\d.]+, min_replicas \d+, max_replicas \d+"
    assert re.search(named, lines[1])


def test_a_joint_search_announces_each_pair_before_it_runs_within_its_bound():
    """--joint: each trial is announced as it starts, naming both counts, the trials
    before it counted and the most still to run never below what the search ran."""
    from sim.planning.joint import joint_size
    from sim.planning.progress import TrialCounter

    from tests.planning.test_joint import SLOS, disaggregated

    events = []
    table = joint_size(disaggregated(), ["prefill", "decode"], SLOS,
                       counter=TrialCounter(lambda *e: events.append(e)))
    ran = int(table["simulations"].iloc[0])
    assert [done for _, done, _, _ in events] == list(range(ran))
    assert all(done + most >= ran for _, done, most, _ in events)
    assert re.fullmatch(r"pools prefill x\d+ and decode x\d+", events[0][0])


def test_the_first_trial_estimates_what_is_left_from_its_share_simulated():
    """Before any trial has ended, the running one's share of its arrival window gives
    the estimate: 10 s for a quarter is 40 s a trial, 30 s of this one and 12 more left."""
    clock, screen = FakeClock(), Terminal()
    line = TrialLine("size", stream=screen, clock=clock, tick_s=None)
    line("the scenario as configured", 0, 13)
    clock.now_s = 10.0
    line.simulated(0.005)         # too little to go by: a run's set-up weighs in
    assert line.text().endswith("elapsed 10 s (simulated 0%)")
    line.simulated(0.25)
    assert line.text().endswith("elapsed 10 s (simulated 25%), about 8 min 30 s left at most")
    line("pool chat 2 x H100 tp1 pp1 bf16/bf16", 1, 12)     # the first took 10 s
    assert line.text().endswith("elapsed 10 s, about 2 min 0 s left at most")  # 10 s x 12
    line.stop()


def test_each_trial_of_a_search_tells_its_share_simulated():
    """Within ``telling``, every trial size runs in this process reports the share of its
    arrival window simulated, rising to the whole window within each trial."""
    from sim.planning.progress import telling
    shares: list[float] = []
    starts: list[int] = []
    data = day_long(False)
    data["duration"] = 600.0
    scenario = Scenario.model_validate(data)
    with telling(shares.append):
        size(scenario, [parse_slo("ttft_p99=2s")],
             watch=lambda *a: starts.append(len(shares)))
    assert len(starts) >= 2 and shares and all(0.0 <= x <= 1.0 for x in shares)
    for begin, end in zip(starts, [*starts[1:], len(shares)]):
        trial = shares[begin:end]
        assert trial == sorted(trial) and trial[0] == 0.0 and trial[-1] == 1.0
