"""`size --window`: sizing trials that simulate a short stretch of a stationary load
instead of the scenario's whole run.

A load is stationary when every stream's requests arrive at one constant rate (Poisson
or gamma, no rate over time, no traces, no closed loops, no multi-turn sessions) and no
pool but those sized is autoscaled: its latencies over any stretch past the warm-up are
draws from the same distribution, so a trial needs only as many requests as the verdict
does, not the hour the scenario runs for. The window is the arrivals after the warm-up; the warm-up
and the drain are kept as the scenario sets them.
"""
from __future__ import annotations

from sim.config.errors import ScenarioError
from sim.config.scenario import Scenario
from sim.planning.overrides import with_values


def stationary_problem(scenario: Scenario, sized: frozenset[str] = frozenset()) -> str | None:
    """Why ``scenario``'s load is not stationary, or None when it is (the pools ``sized``
    lose their autoscaler to a fixed count in each trial, so theirs does not count)."""
    for name, stream in scenario.workload.streams.items():
        arrival = stream.arrival
        if arrival.type not in ("poisson", "gamma"):
            return f"stream {name} arrives by {arrival.type}, not at a constant rate"
        if arrival.rate.type != "constant":
            return f"stream {name}'s rate is {arrival.rate.type}, not constant"
        if stream.sessions is not None:
            return f"stream {name} holds multi-turn sessions"
    for name, pool in scenario.pools.items():
        if name not in sized and pool.autoscaler is not None and pool.autoscaler.type != "fixed":
            return f"pool {name} is autoscaled ({pool.autoscaler.type})"
    return None


def windowed(scenario: Scenario, window_s: float,
             sized: frozenset[str] = frozenset()) -> Scenario:
    """``scenario`` with ``window_s`` of arrivals after its warm-up, refused (naming
    --window) when its load is not stationary or the window is not shorter than the run."""
    problem = stationary_problem(scenario, sized)
    if problem is not None:
        raise ScenarioError(f"a shorter window needs a stationary load, and {problem}: size "
                            "over the whole run (leave --window out)", field="--window")
    duration = scenario.warmup + window_s
    if duration >= scenario.duration:
        raise ScenarioError(f"--window {window_s:g} s after the {scenario.warmup:g} s warm-up "
                            f"is not shorter than the run ({scenario.duration:g} s): leave "
                            "it out", field="--window")
    return with_values(scenario, {"duration": duration})
