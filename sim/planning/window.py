"""`size --window`: sizing trials that simulate a short stretch of a stationary load
instead of the scenario's whole run.

A load is stationary when every stream's requests arrive at one constant rate (Poisson
or gamma, no rate over time, no traces, no closed loops, no multi-turn sessions) and no
pool but those sized is autoscaled: its latencies over any stretch past the warm-up are
draws from the same distribution, so a trial needs only as many requests as the verdict
does, not the hour the scenario runs for. The window is the arrivals after the warm-up; the warm-up
and the drain are kept as the scenario sets them.

``--window auto`` sizes the window from the SLOs: long enough that each stream's requests
in it put ``TAIL_REQUESTS`` beyond the strictest percentile (p99: 100 x 200 = 20,000
requests of the slowest stream; an attainment target a counts as the (100 a)-th
percentile, a mean as the 50th), and never under ``MIN_WINDOW_S`` (queues come and go
over seconds; a minute of them is many cycles). Where that is not shorter than the
run, the run is simulated whole.
"""
from __future__ import annotations

from sim.config.errors import ScenarioError
from sim.config.slos import Slo
from sim.config.scenario import Scenario
from sim.config.overrides import with_values


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
        if name not in sized and not pool.fixed_size:
            return f"pool {name} is autoscaled ({pool.autoscaler.type})"
    return None


def _require_stationary(scenario: Scenario, sized: frozenset[str]) -> None:
    """Refuse (naming --window) a load that is not stationary."""
    problem = stationary_problem(scenario, sized)
    if problem is not None:
        raise ScenarioError(f"a shorter window needs a stationary load, and {problem}: size "
                            "over the whole run (leave --window out)", field="--window")


def windowed(scenario: Scenario, window_s: float,
             sized: frozenset[str] = frozenset()) -> Scenario:
    """``scenario`` with ``window_s`` of arrivals after its warm-up, refused (naming
    --window) when its load is not stationary or the window is not shorter than the run."""
    _require_stationary(scenario, sized)
    duration = scenario.warmup + window_s
    if duration >= scenario.duration:
        raise ScenarioError(f"--window {window_s:g} s after the {scenario.warmup:g} s warm-up "
                            f"is not shorter than the run ({scenario.duration:g} s): leave "
                            "it out", field="--window")
    return with_values(scenario, {"duration": duration})


TAIL_REQUESTS = 200         # requests past the strictest percentile in an automatic window
MIN_WINDOW_S = 60.0         # the shortest automatic window


def tail_share(slo: Slo) -> float:
    """The share of requests beyond the figure ``slo`` judges: 1 - q/100 for a q-th
    percentile, 1 - a for an attainment target a, a half for a mean."""
    if slo.metric == "attainment":
        return max(1.0 - slo.target, 1e-6)
    stat = slo.metric.rsplit("_", 1)[1]
    return 0.5 if stat == "mean" else 1.0 - int(stat[1:]) / 100.0


def auto_window_s(scenario: Scenario, slos: list[Slo]) -> float:
    """The window ``--window auto`` simulates (see the module's docstring); the load must
    be stationary (constant rates) for the rates to be read."""
    rates = [stream.arrival.rate.value for stream in scenario.workload.streams.values()]
    slowest = min((r for r in rates if r > 0), default=0.0)
    if slowest <= 0:
        return scenario.duration
    needed = TAIL_REQUESTS / min(tail_share(s) for s in slos)
    return max(MIN_WINDOW_S, needed / slowest)


def auto_windowed(scenario: Scenario, slos: list[Slo],
                  sized: frozenset[str] = frozenset()) -> tuple[Scenario, float | None]:
    """``scenario`` with the window ``--window auto`` picks, and that window (None where
    it is not shorter than the run, which is then simulated whole)."""
    _require_stationary(scenario, sized)
    window_s = auto_window_s(scenario, slos)
    if scenario.warmup + window_s >= scenario.duration:
        return scenario, None
    return with_values(scenario, {"duration": scenario.warmup + window_s}), window_s
