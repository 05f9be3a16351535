"""What a run will cost, estimated before it starts: the requests its streams will send.

An open-loop stream's requests are drawn before the run (their count is known); a
closed-loop stream with a ``requests:`` count sends that many. A closed-loop stream
without one sends until its window ends, each client again as soon as its last request
ends, or ``REFUSED_PAUSE_S`` after a refusal. Where the gateway refuses every request of
such a stream whatever the run does (an API key it does not know, or one revoked before
the stream starts; a served model its team may not call), its clients send one request
per pause for the whole window: a storm of refusals that is known before the run. Where
it serves them, the clients send at most one request per round trip each (think time and
the request's own time alone on a replica), and together no more than their pool can
finish: its replicas, each stepping its fullest batch (the scheduler's most sequences,
as many as the KV cache holds at the stream's lengths) at the cost model's step time.
Either estimate past ``max_requests`` is refused before the run (it would be refused when
it got there, after the time spent), and any run estimated at more than
``NOTICE_REQUESTS`` requests says so (with a rough time) before it starts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.config.sanity import most_replicas
from sim.config.scenario import Scenario
from sim.core.checks import RunRefused

REFUSED_PAUSE_S = 0.01            # a closed-loop client's pause after a refusal (a round trip)
NOTICE_REQUESTS = 1_000_000       # a run estimated past this many requests says so first
# rough cost of a simulated request on a 2-core machine (docs/speed.md: 54-76 us on the
# default path in make bench, 2026-12-08), for the notice's time range only
SECONDS_PER_REQUEST = (50e-6, 120e-6)


@dataclass(frozen=True)
class StreamWork:
    name: str
    requests: float      # estimated requests (attempts: a refused one counts)
    at_least: bool       # a lower bound (a closed loop's first wave), not an estimate
    why: str             # how it was counted, for the messages
    storm: bool = False  # a closed loop the gateway refuses whatever happens
    bounded: bool = False  # a served closed loop counted to its window's end


@dataclass(frozen=True)
class ClosedLoopPace:
    """How fast a served closed loop's clients can be answered: one client's shortest
    round trip (think time + its request alone on a replica) and the most requests per
    second its pool can finish."""
    round_trip_s: float
    pool_rate_per_s: float
    why: str


def refused_by_gateway(scenario: Scenario, stream) -> str | None:
    """Why the gateway refuses every request of ``stream`` whatever the run does, or
    None."""
    gw = scenario.gateway
    team = stream.team
    if gw.keys:
        key = gw.keys.get(stream.api_key) if stream.api_key else None
        if key is None:
            return (f"its API key '{stream.api_key}' is not one of gateway.keys (401)"
                    if stream.api_key else "it sends no API key and the gateway checks keys "
                                           "(401)")
        if key.revoked_at is not None and key.revoked_at <= stream.start:
            return (f"its API key '{stream.api_key}' is revoked from {key.revoked_at:g} s, "
                    f"before the stream starts (401)")
        team = key.team
    served = gw.route_for(stream.model, stream.pool)
    if served is not None and served.teams is not None and team not in served.teams:
        return f"team '{team}' may not call model '{stream.model}' (403)"
    return None


def _window_s(scenario: Scenario, stream) -> float:
    end_s = scenario.duration if stream.end is None else min(stream.end, scenario.duration)
    return max(end_s - stream.start, 0.0)


def closed_loop_pace(pool, think_s: float, prompt_tokens: float, output_tokens: float
                     ) -> ClosedLoopPace:
    """A served closed loop's pace on ``pool`` at mean lengths ``prompt_tokens`` and
    ``output_tokens``, from the pool's cost model (decode steps; prefill left out, so
    both are the fast side)."""
    cost = pool.cost_model
    context = prompt_tokens + output_tokens / 2
    alone_s = output_tokens * cost.step_scalar(1, 1, 0, context)[0]
    kv = pool.spec.kv
    held = max(int(kv.num_blocks * kv.block_size_tokens // max(context, 1.0)), 1)
    seqs = min(pool.most_sequences(), held)
    full_step_s = cost.step_scalar(seqs, seqs, 0, seqs * context)[0]
    replicas = most_replicas(pool.cfg)
    rate = replicas * seqs / (output_tokens * full_step_s)
    return ClosedLoopPace(think_s + alone_s, rate,
                          f"{replicas:,} replica(s) of pool '{pool.name}' finish at most "
                          f"{rate:,.0f} requests/s ({seqs:,} sequences a step, "
                          f"{1e3 * full_step_s:.3g} ms a step, {output_tokens:,.0f} output "
                          f"tokens a request)")


def estimate(scenario: Scenario, drawn: dict[str, int],
             paces: dict[str, ClosedLoopPace] | None = None) -> list[StreamWork]:
    """Each stream's requests: ``drawn`` gives those drawn before the run (a closed loop's
    first wave among them); ``paces`` a served open-ended closed loop's pace (without
    it, its first wave is counted, a lower bound)."""
    out = []
    for name, stream in scenario.workload.streams.items():
        arrival = stream.arrival
        refused = refused_by_gateway(scenario, stream)
        n = float(drawn.get(name, 0))
        if arrival.type != "closed" or arrival.requests is not None:
            attempts = stream.retry.max_attempts if refused and stream.retry else 1
            out.append(StreamWork(name, n * attempts, False,
                                  f"{n:,.0f} drawn" + (f", each tried {attempts} times "
                                                       f"({refused})" if attempts > 1 else "")))
            continue
        window_s = _window_s(scenario, stream)
        if refused is None:
            pace = (paces or {}).get(name)
            clients = arrival.concurrency
            if pace is None:
                out.append(StreamWork(name, float(clients), True,
                                      f"{clients:,} clients, each again after every "
                                      f"answer for {window_s:g} s"))
                continue
            by_clients = clients * window_s / pace.round_trip_s
            by_pool = pace.pool_rate_per_s * window_s
            why = (f"{clients:,} clients, each again after every answer for "
                   f"{window_s:g} s: " + (
                       f"each at most one request per {1e3 * pace.round_trip_s:.3g} ms "
                       f"(think time + the request alone on a replica)"
                       if by_clients <= by_pool else pace.why))
            out.append(StreamWork(name, clients + min(by_clients, by_pool), False, why,
                                  bounded=True))
            continue
        each_s = arrival.think_time + REFUSED_PAUSE_S
        storm = arrival.concurrency * max(math.ceil(window_s / each_s), 1)
        out.append(StreamWork(name, float(storm), False,
                              f"every request is refused ({refused}), and each of its "
                              f"{arrival.concurrency:,} clients sends again "
                              f"{1e3 * each_s:g} ms later, for {window_s:g} s", storm=True))
    return out


def closed_loop_paces(scenario: Scenario, arrivals, pools: dict, stream_pool: dict
                      ) -> dict[str, ClosedLoopPace]:
    """The pace of each served, open-ended closed loop, at the mean lengths of its first
    wave, on the pool its requests go to."""
    paces = {}
    for s, name in enumerate(arrivals.stream_names):
        stream = scenario.workload.streams[name]
        arrival = stream.arrival
        if (arrival.type != "closed" or arrival.requests is not None
                or refused_by_gateway(scenario, stream) is not None):
            continue
        rows = arrivals.stream_index == s
        if not rows.any():
            continue
        paces[name] = closed_loop_pace(pools[stream_pool[name]], arrival.think_time,
                                       float(arrivals.prompt_tokens[rows].mean()),
                                       float(arrivals.output_tokens[rows].mean()))
    return paces


def check_work(scenario: Scenario, stream_index: np.ndarray, stream_names: list[str],
               paces: dict[str, ClosedLoopPace] | None = None) -> str | None:
    """Refuse a run whose known storm of refusals, or whose served closed loop at its
    ``paces``, passes ``max_requests``; the notice a long run gives before it starts (None
    for a short one)."""
    counts = np.bincount(stream_index, minlength=len(stream_names))
    work = estimate(scenario, {s: int(c) for s, c in zip(stream_names, counts)}, paces)
    for w in work:
        if w.bounded and w.requests > scenario.max_requests:
            raise RunRefused(
                ("workload", "streams", w.name, "arrival"),
                f"about {w.requests:,.0f} requests at most ({w.why}); past max_requests = "
                f"{scenario.max_requests:,}: give the stream arrival.requests, a "
                f"think_time, fewer clients or a shorter window, or raise max_requests")
        if w.storm and w.requests > scenario.max_requests:
            raise RunRefused(
                ("workload", "streams", w.name, "arrival"),
                f"about {w.requests:,.0f} requests: {w.why}; past max_requests = "
                f"{scenario.max_requests:,}: give the stream a key the gateway knows, "
                f"arrival.requests, a think_time, or fewer clients")
    total = sum(w.requests for w in work)
    if total < NOTICE_REQUESTS:
        return None
    top = max(work, key=lambda w: w.requests)
    bound = "at least " if any(w.at_least for w in work) else "about "
    fast_s, slow_s = (total * s for s in SECONDS_PER_REQUEST)
    return (f"{scenario.name}: {bound}{total:,.0f} requests to simulate (stream "
            f"'{top.name}': {top.why}); at {1e6 * SECONDS_PER_REQUEST[0]:.0f}-"
            f"{1e6 * SECONDS_PER_REQUEST[1]:.0f} us a request, {bound}{fast_s:,.0f}-"
            f"{slow_s:,.0f} s")
