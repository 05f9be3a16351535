"""What a run will cost, estimated before it starts: the requests its streams will send.

An open-loop stream's requests are drawn before the run (their count is known); a
closed-loop stream with a ``requests:`` count sends that many. A closed-loop stream
without one sends until its window ends, each client again as soon as its last request
ends, or ``REFUSED_PAUSE_S`` after a refusal. Where the gateway refuses every request of
such a stream whatever the run does (an API key it does not know, or one revoked before
the stream starts; a served model its team may not call), its clients send one request
per pause for the whole window: a storm of refusals that is known before the run. That
is refused past ``max_requests``, and any run estimated at more than ``NOTICE_REQUESTS``
requests says so (with a rough time) before it starts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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


def estimate(scenario: Scenario, drawn: dict[str, int]) -> list[StreamWork]:
    """Each stream's requests: ``drawn`` gives those drawn before the run (a closed loop's
    first wave among them)."""
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
            out.append(StreamWork(name, float(arrival.concurrency), True,
                                  f"{arrival.concurrency:,} clients, each again after every "
                                  f"answer for {window_s:g} s"))
            continue
        each_s = arrival.think_time + REFUSED_PAUSE_S
        storm = arrival.concurrency * max(math.ceil(window_s / each_s), 1)
        out.append(StreamWork(name, float(storm), False,
                              f"every request is refused ({refused}), and each of its "
                              f"{arrival.concurrency:,} clients sends again "
                              f"{1e3 * each_s:g} ms later, for {window_s:g} s", storm=True))
    return out


def check_work(scenario: Scenario, stream_index: np.ndarray, stream_names: list[str]
               ) -> str | None:
    """Refuse a run whose known storm of refusals passes ``max_requests``; the notice a
    long run gives before it starts (None for a short one)."""
    counts = np.bincount(stream_index, minlength=len(stream_names))
    work = estimate(scenario, {s: int(c) for s, c in zip(stream_names, counts)})
    for w in work:
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
