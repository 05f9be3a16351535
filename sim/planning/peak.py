"""`size --peak DURATION`: size a non-stationary load (a diurnal day, a trace) at its
busiest window, then confirm the fleet chosen over the whole run.

The busiest window of length D is the one with the most arrivals: for a stream arriving
at a rate over time (poisson or gamma), the expected count Λ(t + D) − Λ(t) of its rate
function (within the stream's start and end); for a trace, the count of its timestamps
in [t, t + D). Summed over the streams, the count is taken at every start t on a fine
grid over the run, at every trace arrival and every rate breakpoint, and the best start
is refined by golden-section search (a sinusoid's window is centred on its crest:
t = phase + period/4 − D/2). Nothing is drawn at random: the window is the same for any
seed.

Each sizing trial simulates the run up to the window's end and judges the SLOs over the
arrivals in the window (the warm-up is moved to its start). Where nothing but the pools
sized is autoscaled, a rate stream starts a lead (the scenario's warm-up, at least
:data:`MIN_LEAD_S`) before the window, so a day-long run is simulated for its peak hour
alone; a rate stream that ended before that start is left out of the trials (its requests
were done before the lead, as the other streams' earlier ones), the whole-run confirmation
runs it; a trace keeps its start
(its times are offsets from it). The fleet chosen is then
run over the whole run, its SLOs judged there too: a fleet sized for the peak may still
miss them elsewhere (a cold start in a trough, a second peak of another stream), and
`size` says so.
"""
from __future__ import annotations

import math

import numpy as np

from sim.config.errors import ScenarioError
from sim.config.scenario import Scenario
from sim.config.slos import Slo
from sim.config.workload import PiecewiseRateConfig
from sim.config.overrides import with_values
from sim.workload.rates import build_rate

GRID_POINTS = 4_001         # window starts tried over the run, besides the breakpoints
MIN_LEAD_S = 60.0           # the least run a rate stream gets before the window
GOLDEN_STEPS = 80           # refinement of the best start (to ~1e-17 of the grid's step)


def peak_problem(scenario: Scenario, window_s: float) -> str | None:
    """Why ``--peak`` cannot apply to ``scenario`` with a window of ``window_s``, or None."""
    for name, stream in scenario.workload.streams.items():
        if stream.arrival.type == "closed":
            return (f"stream {name} is closed-loop: its arrivals follow the fleet's answers, "
                    "so no window of the load is known before a run")
        if stream.sessions is not None:
            return (f"stream {name} holds multi-turn sessions: their later turns follow the "
                    "fleet's answers, so no window of the load is known before a run")
    if window_s >= scenario.duration:
        return (f"the window ({window_s:g} s) is not shorter than the run "
                f"({scenario.duration:g} s): size over the whole run (leave --peak out)")
    return None


def _stop_s(scenario: Scenario, stream) -> float:
    return min(scenario.duration, stream.end if stream.end is not None else math.inf)


def _trace_times(scenario: Scenario) -> np.ndarray:
    """The arrival times of the scenario's trace streams (sorted), as a run reads them."""
    traces = {name: s for name, s in scenario.workload.streams.items()
              if s.arrival.type == "trace"}
    if not traces:
        return np.empty(0)
    from sim.api import prepare
    only = with_values(scenario, {"workload.streams": {
        name: s.model_dump(mode="json") for name, s in traces.items()}})
    return np.sort(np.asarray(prepare(only).arrivals.arrival_s, dtype=np.float64))


def arrivals_in(scenario: Scenario, window_s: float):
    """The arrival count in [t, t + ``window_s``) as a vectorised function of t: the rate
    streams' expected counts plus the trace streams' timestamps; and the starts where a
    maximum may lie besides a grid (trace arrivals, rate breakpoints)."""
    scale = scenario.workload.rate_scale
    rates, marks = [], []
    for stream in scenario.workload.streams.values():
        if stream.arrival.type in ("poisson", "gamma"):
            lo, hi = stream.start, _stop_s(scenario, stream)
            rates.append((build_rate(stream.arrival.rate, scale), lo, hi))
            edges = [lo, hi]
            if isinstance(stream.arrival.rate, PiecewiseRateConfig):
                edges += [t for t, _ in stream.arrival.rate.points]
            marks += [e for t in edges for e in (t, t - window_s)]
    times = _trace_times(scenario)

    def count(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        total = np.zeros_like(t)
        for rate, lo, hi in rates:
            a, b = np.clip(t, lo, hi), np.clip(t + window_s, lo, hi)
            total += rate.cumulative(b) - rate.cumulative(a)
        if len(times):
            total += (np.searchsorted(times, t + window_s, side="left")
                      - np.searchsorted(times, t, side="left"))
        return total

    return count, np.concatenate([np.asarray(marks, dtype=np.float64), times])


def busiest_window(scenario: Scenario, window_s: float) -> tuple[float, float]:
    """The start of the busiest window of ``window_s`` in the run and its arrival count
    (expected, for rate streams)."""
    last = scenario.duration - window_s
    count, marks = arrivals_in(scenario, window_s)
    grid = np.linspace(0.0, last, GRID_POINTS)
    # the marks first: of equal counts, a window starting at a trace arrival or a rate
    # breakpoint (the earliest such) is taken before a grid point
    starts = np.concatenate([np.clip(marks, 0.0, last), grid])
    counts = count(starts)
    best = int(np.argmax(counts))
    step = last / (GRID_POINTS - 1)
    lo, hi = max(0.0, starts[best] - step), min(last, starts[best] + step)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(GOLDEN_STEPS):       # refine: a smooth rate's crest lies between points
        x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        f1, f2 = count(np.array([x1, x2]))
        lo, hi = (lo, x2) if f1 >= f2 else (x1, hi)
    middle = (lo + hi) / 2
    refined = float(count(np.array([middle]))[0])
    if refined > counts[best]:
        return middle, refined
    return float(starts[best]), float(counts[best])


def peak_windowed(scenario: Scenario, window_s: float,
                  sized: frozenset[str] = frozenset()) -> tuple[Scenario, dict]:
    """``scenario`` cut to its busiest window of ``window_s`` (see the module's
    docstring), refused (naming --peak) where the window cannot be known; and what was
    found: the window's start and end, its arrival count and the run's, and the streams
    left out of the trials (they ended before the lead)."""
    problem = peak_problem(scenario, window_s)
    if problem is not None:
        raise ScenarioError(f"--peak sizes at the busiest window of a load known before "
                            f"the run, and {problem}", field="--peak")
    start_s, count = busiest_window(scenario, window_s)
    whole, _ = arrivals_in(scenario, scenario.duration)
    values = {"duration": start_s + window_s, "warmup": max(scenario.warmup, start_s)}
    others = [p for name, p in scenario.pools.items()
              if name not in sized and not p.fixed_size]
    lead_s = max(scenario.warmup, MIN_LEAD_S)
    ended = []                  # rate streams that stopped before the lead
    if not others and start_s > lead_s:
        for name, stream in scenario.workload.streams.items():
            if stream.arrival.type not in ("poisson", "gamma"):
                continue
            if _stop_s(scenario, stream) <= start_s - lead_s:
                ended.append(name)
            else:
                values[f"workload.streams.{name}.start"] = max(stream.start,
                                                               start_s - lead_s)
    return _left_out(with_values(scenario, values), ended), {
        "window_start_s": start_s, "window_end_s": start_s + window_s,
        "window_arrivals": count, "run_arrivals": float(whole(np.array([0.0]))[0]),
        "lead_s": lead_s if not others and start_s > lead_s else start_s,
        "streams_left_out": ended}


def _left_out(scenario: Scenario, ended: list[str]) -> Scenario:
    """``scenario`` without the streams ``ended`` (they stopped before a trial's lead), and
    without the SLO blocks only they gave a subject: a stream's own, a team's no stream
    left sends for (the whole ``slos:`` block where nothing else is left in it)."""
    if not ended:
        return scenario
    from sim.config.sanity import sending_teams
    from sim.config.slos import targets

    values = {"workload.streams": {name: s.model_dump(mode="json") for name, s in
                                   scenario.workload.streams.items() if name not in ended}}
    kept = with_values(scenario, values)
    slos = kept.slos
    if slos is None:
        return kept
    sending = sending_teams(kept)
    teams = {t: b for t, b in slos.teams.items() if t in sending}
    streams = {n: b for n, b in slos.streams.items() if n not in ended}
    if (teams, streams) == (slos.teams, slos.streams):
        return kept
    if not targets(slos) and not teams and not streams:
        return with_values(kept, {"slos": None})
    dump = lambda blocks: {k: b.model_dump(mode="json") for k, b in blocks.items()}
    return with_values(kept, {"slos.teams": dump(teams), "slos.streams": dump(streams)})


def confirm(fleet: Scenario, pools: list[str], slos: list[Slo], confidence) -> list[dict]:
    """The fleet chosen (``fleet``: the scenario with every pool sized) run over the whole
    run, once for every pool (its seed's run is each pool's first sample): for each pool
    of ``pools``, its SLO figures there and whether they are met."""
    from sim.output.slo import margins
    from sim.planning.progress import run_trial
    from sim.planning.trial import verdict

    rows = []
    ran = run_trial(fleet) if pools else None
    for pool in pools:
        one = verdict(fleet, pool, slos, confidence, ran=ran)
        margin = margins(one.estimate, slos)
        rows.append({"pool": pool, "met": bool(one.ok), **one.estimate,
                     **{f"margin_{k}": v for k, v in margin.items()}})
    return rows
