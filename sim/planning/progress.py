"""What a sizing search tells whoever watches it: each trial as it starts.

A trial of a day-long scenario may take minutes, so a watcher told only when trials end
would show nothing for minutes. A :data:`Watch` is told as each trial starts what it
runs, how many trials ran before it and the most the search may still run, that one
included (the worst case of the bisections left, as the search's budget counts them):
enough for a line from the first second, and an estimate of the time left (the mean
time of the trials done times the most still to run).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import sim
from sim.config.scenario import Scenario

# (what the trial starting runs, trials run before it, the most still to run with it,
# the unit: "trial", or "option" where options are searched side by side elsewhere)
Watch = Callable[[str, int, int, str], None]
# the share of the running trial's arrival window simulated so far, in [0, 1]
Simulated = Callable[[float], None]

_SIMULATED: ContextVar[Simulated | None] = ContextVar("simulated", default=None)


@contextmanager
def telling(simulated: Simulated | None) -> Iterator[None]:
    """Within the block, each trial run in this process (:func:`run_trial`) tells
    ``simulated`` how far it has got, so that a watcher can say how long the first trial
    of a day-long scenario will take before it ends."""
    token = _SIMULATED.set(simulated)
    try:
        yield
    finally:
        _SIMULATED.reset(token)


def run_trial(scenario: Scenario, **kwargs) -> "sim.Results":
    """``sim.run(scenario, **kwargs)``, telling the watcher :func:`telling` set (if any)
    the share of the arrival window simulated, about 500 times a run."""
    tell = _SIMULATED.get()
    if tell is None:
        return sim.run(scenario, **kwargs)
    duration_s = scenario.duration
    return sim.run(scenario, progress=lambda now_s, _limit_s: tell(min(now_s / duration_s,
                                                                        1.0)), **kwargs)


class TrialCounter:
    """Counts a search's trials and tells ``watch`` of each as it starts. ``most_after``:
    the most trials the parts of the search not yet begun may run, set by the search as
    it moves from part to part."""

    def __init__(self, watch: Watch | None, most_after: int = 0) -> None:
        self.watch = watch
        self.done = 0
        self.most_after = most_after

    def start(self, what: str, most_left_here: int) -> None:
        """A trial starts: ``what`` it runs, and the most its part of the search may still
        run, this trial included (at least this one)."""
        if self.watch is not None:
            self.watch(what, self.done, max(1, most_left_here) + self.most_after, "trial")
        self.done += 1


def option_text(pool: str, option: dict, replicas: int) -> str:
    """A trial of a sizing option, named in full: pool chat 4 x H100-SXM tp2 pp1
    fp8/bf16 (weights/KV cache)."""
    return (f"pool {pool} {replicas} x {option['hardware']} tp{option['tp']} "
            f"pp{option.get('pp', 1)} {option['weight_dtype']}/{option['kv_dtype']}")
