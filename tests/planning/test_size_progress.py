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
from sim.planning.overrides import with_values
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
    clock.now_s = 150.0           # a minute into the fourth: a minute less is left
    assert line.text().endswith("elapsed 2 min 30 s, about 3 min 30 s left at most")
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
