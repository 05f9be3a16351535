"""Does the scenario make sense, and does it fit? Checks on the validated scenario as a
whole, each naming the field at fault: times against the run's length, loops and
mismatches in routes, and budgets on what drives work and memory (requests, time-series
samples, autoscaler ticks), each naming its bound and how to move it.
"""
from __future__ import annotations

import os
import unicodedata

import numpy as np

from sim.config.lengths import bounds, least_request, longest
from sim.config.scenario import Scenario
from sim.config.slos import ATTAINMENT_ALONE, targets
from sim.config.workload import ClosedArrivalConfig, StreamConfig, TraceArrivalConfig
from sim.workload.rates import build_rate

Loc = tuple
MAX_SAMPLES = 2_000_000          # time-series rows: (duration + drain) / sample_interval
MAX_TICKS = 1_000_000            # autoscaler decisions: (duration + drain) / tick (about 30 s)
# resident bytes per request a run holds (request object, its row, its arrival), measured
# on a 2.1-million-request run with room to spare
BYTES_PER_REQUEST = 2048


def expected_requests(scenario: Scenario, stream: StreamConfig) -> float:
    """How many requests ``stream`` sends on average: its rate integrated over its window
    (a trace: none known before reading)."""
    arrival = stream.arrival
    if isinstance(arrival, ClosedArrivalConfig):
        # without a count, the first wave: the rest the run's own length bounds (and the
        # run stops at max_requests)
        return float(arrival.requests if arrival.requests is not None
                     else arrival.concurrency)
    if isinstance(arrival, TraceArrivalConfig):
        return 0.0
    end_s = scenario.duration if stream.end is None else min(stream.end, scenario.duration)
    if end_s <= stream.start:
        return 0.0
    rate = build_rate(arrival.rate, scenario.workload.rate_scale)
    sent = rate.cumulative(np.array([stream.start, end_s]))
    if stream.sessions is not None:     # conversations, each of at most so many turns
        return float(sent[1] - sent[0]) * mean_turns(stream.sessions.turns)
    return float(sent[1] - sent[0])


def mean_turns(turns) -> float:
    """A conversation's turns on average: exact for fixed and uniform counts, the most it
    may draw otherwise (an upper bound, which is what a budget needs)."""
    if turns.type == "fixed":
        return float(turns.value)
    if turns.type == "uniform":
        return (turns.low + turns.high) / 2.0
    return float(bounds(turns)[1])


def _names_told_apart(scenario: Scenario) -> list[tuple[Loc, str]]:
    """Two pools, streams or teams whose names differ only in case (or in the width of
    their characters) read as one in a report: refused."""
    problems: list[tuple[Loc, str]] = []
    blocks = {("pools",): scenario.pools, ("workload", "streams"): scenario.workload.streams,
              ("gateway", "teams"): scenario.gateway.teams}
    for where, names in blocks.items():
        seen: dict[str, str] = {}
        for name in names:
            key = unicodedata.normalize("NFKC", name).casefold()
            if key in seen:
                problems.append((where + (name,), f"'{name}' differs from '{seen[key]}' only "
                                 "in case or character width: name them apart"))
            seen.setdefault(key, name)
    return problems


MAX_FLEET_REPLICAS = 20_000     # engines simulated at once, all pools together
MAX_SPOT_LOSSES = 1_000_000     # expected spot preemptions over a run, all pools together


def most_replicas(pool) -> int:
    """The most replicas a pool may hold at once: its replicas or its autoscaler's max."""
    return max(pool.replicas, pool.autoscaler.most_replicas() if pool.autoscaler else 0)


def _fleet_size(scenario: Scenario, run_s: float) -> list[tuple[Loc, str]]:
    """Budgets over all pools together: replicas (the most each may have), autoscaler
    decisions and spot preemptions (each bounded per pool elsewhere)."""
    problems: list[tuple[Loc, str]] = []
    most = {name: most_replicas(pool) for name, pool in scenario.pools.items()}
    if sum(most.values()) > MAX_FLEET_REPLICAS:
        problems.append((("pools",), f"the pools may hold {sum(most.values()):,} replicas "
                         f"together (each its replicas or its autoscaler's max_replicas); "
                         f"the most simulated at once is {MAX_FLEET_REPLICAS:,}"))
    for name, pool in scenario.pools.items():      # what `size` may try beside the rest
        if pool.sizing is None:
            continue
        others = sum(most.values()) - most[name]
        if pool.sizing.max_replicas + others > MAX_FLEET_REPLICAS:
            problems.append((("pools", name, "sizing", "max_replicas"),
                             f"size may try {pool.sizing.max_replicas:,} replicas of this "
                             f"pool" + (f" beside the other pools' {others:,}" if others
                                        else "") + f"; the most simulated at once is "
                             f"{MAX_FLEET_REPLICAS:,}: at most "
                             f"{max(MAX_FLEET_REPLICAS - others, 0):,} here"))
    periods_s = [pool.autoscaler.decision_period_s() for pool in scenario.pools.values()
                 if pool.autoscaler is not None]
    each = [run_s / tick_s for tick_s in periods_s if tick_s]
    ticks = sum(each)
    if ticks > MAX_TICKS and all(n <= MAX_TICKS for n in each):   # one pool: said there
        problems.append((("pools",), f"{ticks:.3g} autoscaler decisions over duration + drain,"
                         f" all pools together; the most is {MAX_TICKS:,}: raise the "
                         "autoscalers' tick"))
    losses = sum(pool.spot.preemptions_per_hour * most[name] * run_s / 3600.0
                 for name, pool in scenario.pools.items() if pool.spot is not None)
    if losses > MAX_SPOT_LOSSES:
        problems.append((("pools",), f"about {losses:.3g} spot preemptions over the run "
                         f"(preemptions_per_hour x replicas x hours, all pools); the most is "
                         f"{MAX_SPOT_LOSSES:,}: fewer replicas, a lower rate or a shorter run"))
    return problems


def _check_closed_loop(here: Loc, scenario: Scenario, stream: StreamConfig
                       ) -> list[tuple[Loc, str]]:
    """A client's pause longer than the stream's window: each client would send one request
    (more than one client per request: the pause never matters)."""
    arrival = stream.arrival
    if not isinstance(arrival, ClosedArrivalConfig) or (
            arrival.requests is not None and arrival.requests <= arrival.concurrency):
        return []
    end_s = scenario.duration if stream.end is None else min(stream.end, scenario.duration)
    if arrival.think_time < end_s - stream.start:
        return []
    return [(here + ("arrival", "think_time"), f"a client pauses {arrival.think_time:g} s "
             f"between requests, as long as the stream's window ({end_s - stream.start:g} s):"
             f" each of the {arrival.concurrency:,} clients would send one request"
             + (f" of the {arrival.requests:,} asked for" if arrival.requests is not None
                else "") + "; shorten think_time")]


def request_budget(requests: float, max_requests: int, remedy: str,
                   max_remedy: str = "") -> str | None:
    """What is wrong with a run of ``requests`` requests, as the rest of a sentence that
    gave their number: more than ``max_requests``, or more than three quarters of this
    machine's memory at BYTES_PER_REQUEST each; None when they fit."""
    if requests > max_requests:
        return (f"; the most is max_requests = {max_requests:,} (raise it at the scenario's "
                "top level if the machine has the memory: about "
                f"{BYTES_PER_REQUEST} bytes per request){max_remedy}")
    memory = memory_bytes()
    need = requests * BYTES_PER_REQUEST
    if memory is not None and need > 0.75 * memory:
        return (f", about {need / 2 ** 30:.1f} GiB; this machine has "
                f"{memory / 2 ** 30:.1f} GiB: {remedy}")
    return None


def memory_bytes() -> float | None:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check(scenario: Scenario) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    duration_s, run_s = scenario.duration, scenario.duration + scenario.drain
    if scenario.warmup >= duration_s:
        problems.append((("warmup",), f"warm-up ({scenario.warmup:g} s) must end before the "
                         f"arrivals do (duration {duration_s:g} s): every request would be "
                         "left out of the latency figures"))
    if scenario.sample_interval > duration_s:
        problems.append((("sample_interval",), f"sample interval ({scenario.sample_interval:g}"
                         f" s) is longer than the run's duration ({duration_s:g} s): the time "
                         "series would have no sample inside it"))
    elif len(scenario.pools) * run_s / scenario.sample_interval > MAX_SAMPLES:
        rows = len(scenario.pools) * run_s / scenario.sample_interval
        problems.append((("sample_interval",), f"{rows:.3g} time-series samples (one per pool"
                         f" per interval over duration + drain, {run_s:g} s); the most is "
                         f"{MAX_SAMPLES:,}: raise sample_interval to at least "
                         f"{rows / MAX_SAMPLES * scenario.sample_interval:.3g} s"))
    problems.extend(_fleet_size(scenario, run_s))
    total = 0.0
    for name, stream in scenario.workload.streams.items():
        here = ("workload", "streams", name)
        if stream.start >= duration_s:
            problems.append((here + ("start",), f"the stream starts at {stream.start:g} s, "
                             f"after the run's arrivals end (duration {duration_s:g} s): it "
                             "would send nothing"))
        problems.extend(_check_closed_loop(here, scenario, stream))
        sessions = getattr(stream, "sessions", None)
        least = least_request(stream)
        if sessions is not None and sessions.max_context_tokens is not None and \
                least is not None and least > sessions.max_context_tokens:
            problems.append((here + ("sessions", "max_context_tokens"), "every conversation "
                             "would end before its first turn: a first prompt and its answer "
                             f"take at least {least:,} tokens, past max_context_tokens "
                             f"({sessions.max_context_tokens:,}); the stream would send "
                             "nothing"))
        expected = expected_requests(scenario, stream)
        if not isinstance(stream.arrival, (ClosedArrivalConfig, TraceArrivalConfig)) and \
                stream.start < duration_s and not expected >= 1e-3:     # NaN too
            problems.append((here, f"the stream's rate adds up to {expected:.3g} requests "
                             "over its window (start to end or duration): it would most "
                             "likely send nothing; raise its rate or lengthen the run"))
        total += expected
    for name, pool in scenario.pools.items():
        here = ("pools", name)
        tick_s = pool.autoscaler.decision_period_s() if pool.autoscaler else None
        if tick_s is not None and tick_s >= run_s:
            problems.append((here + ("autoscaler", "tick"), f"the first decision would come "
                             f"at {tick_s:g} s, after the run ({run_s:g} s with its drain): "
                             "the autoscaler would never act; shorten tick"))
        elif tick_s is not None and run_s / tick_s > MAX_TICKS:
            problems.append((here + ("autoscaler", "tick"), f"{run_s / tick_s:.3g} autoscaler "
                             f"decisions over duration + drain; the most is {MAX_TICKS:,}: "
                             f"raise tick to at least {run_s / MAX_TICKS:.3g} s"))
        if pool.spot is not None and pool.spot.preemptions_per_hour > 0 and \
                pool.fixed_size:
            problems.append((here + ("spot",), "a spot pool of fixed size never gets back "
                             "the replicas the provider takes: give it an autoscaler that "
                             "replaces them (type: target with min_replicas, or scheduled), "
                             "or set preemptions_per_hour: 0"))
    for block in ("models", "hardware"):
        for key, spec in getattr(scenario, block).items():
            if spec.name.lower() != key.lower():
                problems.append(((block, key, "name"), f"the profile is listed as '{key}' but "
                                 f"named '{spec.name}': pools find it by '{key}' and reports "
                                 f"would say '{spec.name}'; give both the same name"))
    problems.extend(_names_told_apart(scenario))
    problems.extend(_check_pool_policies(scenario))
    problems.extend(_check_teams(scenario))
    problems.extend(_check_slos(scenario))
    over = request_budget(total, scenario.max_requests, "shorten the run or lower the rates")
    if over is not None:
        problems.append((("workload",), f"the streams would send up to {total:.3g} "
                         f"requests{over}"))
    return problems


def _known_teams(scenario: Scenario) -> set[str]:
    gw = scenario.gateway
    return ({s.team for s in scenario.workload.streams.values()} | set(gw.teams)
            | {k.team for k in gw.keys.values()})


def _check_pool_policies(scenario: Scenario) -> list[tuple[Loc, str]]:
    """Settings a pool's policies would ignore, or that leave it nothing to serve with."""
    problems: list[tuple[Loc, str]] = []
    teams = _known_teams(scenario)
    for name, pool in scenario.pools.items():
        here = ("pools", name)
        if pool.autoscaler is not None:
            problems.extend((here + ("autoscaler",) + loc, message) for loc, message
                            in pool.autoscaler.problems(scenario.duration + scenario.drain))
        queue = pool.queue
        if queue.weights and not queue.fair:
            problems.append((here + ("queue", "weights"), "weights share the queue between "
                             "teams only with fair: true; add it or remove the weights"))
        fixed = pool.fixed_size
        if fixed and pool.cold_start != type(pool.cold_start)():
            problems.append((here + ("cold_start",), "cold_start times replicas an autoscaler "
                             "adds; every replica of a pool of fixed size is up at time 0: "
                             "add an autoscaler or remove cold_start"))
        problems.extend(_check_pricing(here, pool))
        if pool.kv_cache_bytes is not None and \
                pool.gpu_memory_utilization != type(pool).model_fields[
                    "gpu_memory_utilization"].default:
            problems.append((here + ("gpu_memory_utilization",), "kv_cache_bytes sets the KV "
                             "cache's size itself (as vLLM's kv_cache_memory_bytes does, which "
                             "overrides gpu_memory_utilization): give one of them"))
        if fixed and queue.max_outstanding_per_replica is None and \
                (queue.capacity is not None or queue.fair):
            what = "capacity" if queue.capacity is not None else "fair"
            problems.append((here + ("queue", what), f"queue.{what} takes effect only when "
                             "requests wait in the pool, and in a pool of fixed size without "
                             "max_outstanding_per_replica every request goes to a replica at "
                             "once: set queue.max_outstanding_per_replica (or an autoscaler)"))
        for team in queue.weights:
            if team not in teams:
                problems.append((here + ("queue", "weights", team), f"unknown team '{team}'; "
                                 f"teams: {', '.join(sorted(teams))}"))
    return problems


def _check_pricing(here: Loc, pool) -> list[tuple[Loc, str]]:
    """The price that applies is the one asked for: a spot pool billed at another price,
    or a purchase option beside a price that overrides it."""
    if pool.price_per_gpu_hour is not None and pool.pricing != "on_demand":
        return [(here + ("pricing",), f"price_per_gpu_hour ({pool.price_per_gpu_hour:g}) "
                 f"overrides the hardware's prices, so pricing: {pool.pricing} would choose "
                 "nothing: give one of them")]
    if pool.spot is not None and pool.pricing != "spot" and pool.price_per_gpu_hour is None:
        return [(here + ("pricing",), f"the pool's replicas are spot (spot: is set) but "
                 f"billed at the {pool.pricing} price: set pricing: spot, or a "
                 "price_per_gpu_hour")]
    return []


def _stream_team(scenario: Scenario, stream: StreamConfig) -> str:
    key = scenario.gateway.keys.get(stream.api_key) if stream.api_key is not None else None
    return key.team if key is not None else stream.team


def _limits_pass_a_request(scenario: Scenario) -> list[tuple[Loc, str]]:
    """A team limit smaller than one request lets none of it through: a requests-per-minute
    bucket below one request, a tokens-per-minute bucket or a token budget below the
    smallest request a stream of the team sends (each bucket holds one minute's worth)."""
    problems: list[tuple[Loc, str]] = []
    for team, limits in scenario.gateway.teams.items():
        here = ("gateway", "teams", team)
        if limits.requests_per_min is not None and limits.requests_per_min < 1:
            problems.append((here + ("requests_per_min",), f"{limits.requests_per_min:g} "
                             "requests a minute never lets a request through (the bucket "
                             "holds a minute's worth, less than one request): give at least 1"))
        token_limits = [(("tokens_per_min",), limits.tokens_per_min, "a minute's worth")]
        if limits.budget is not None and limits.budget.tokens is not None:
            token_limits.append((("budget", "tokens"), limits.budget.tokens, "a period's"))
        for sname, stream in scenario.workload.streams.items():
            least = least_request(stream)
            if least is None or _stream_team(scenario, stream) != team:
                continue
            for field, limit, held in token_limits:
                if limit is not None and limit < least:
                    problems.append((here + field, f"{limit:g} tokens is less than the "
                                     f"smallest request of stream '{sname}' ({least:,} tokens"
                                     f", prompt + output): {held} never lets one through; "
                                     f"give at least {least:,}"))
    return problems


def sending_teams(scenario: Scenario) -> set[str]:
    """The teams the streams send for (a stream's API key's team, where it names no other)."""
    gw, sending = scenario.gateway, set()
    for stream in scenario.workload.streams.values():
        key = gw.keys.get(stream.api_key) if stream.api_key is not None else None
        sending.add(key.team if key is not None and stream.team == "default" else stream.team)
    return sending


def _check_slos(scenario: Scenario) -> list[tuple[Loc, str]]:
    """An SLO block that sets nothing, or a team's SLOs for a team no stream sends for."""
    slos = scenario.slos
    if slos is None:
        return []
    problems: list[tuple[Loc, str]] = []
    if not targets(slos) and not slos.teams and not slos.streams:
        problems.append((("slos",), "sets no objective; give e.g. ttft_p99: 2s, or remove "
                         "the block"))
    sending = sending_teams(scenario)
    # a TPOT bound needs a request of two output tokens or more: one-token answers have
    # no time per output token
    one_token = [s for s in scenario.workload.streams.values()
                 if s.output_tokens is not None and longest(s.output_tokens) == 1]
    if one_token and len(one_token) == len(scenario.workload.streams):
        for metric in (o.metric for o in targets(slos)):
            if metric.startswith(("tpot_", "max_itl_")):
                problems.append((("slos", metric), "no stream has an answer longer than one "
                                 "token, so no request has a time per output token or a "
                                 "gap between two: bound TTFT or E2E instead"))
    for where, block in [(("slos",), slos)] + [
            (("slos", "teams", t), b) for t, b in slos.teams.items()] + [
            (("slos", "streams", s), b) for s, b in slos.streams.items()]:
        metrics = [o.metric for o in targets(block)]
        if metrics == ["attainment"]:
            problems.append((where + ("attainment",), ATTAINMENT_ALONE))
    # a team's or a stream's own SLOs: for one that sends, and setting something
    for scope, blocks, known, unknown in (
            ("teams", slos.teams, sorted(sending), "no stream sends for team '{}'"),
            ("streams", slos.streams, list(scenario.workload.streams), "no stream '{}'")):
        for name, block in blocks.items():
            if name not in known:
                problems.append((("slos", scope, name), f"{unknown.format(name)}; {scope}: "
                                 f"{', '.join(known)}"))
            elif not targets(block):
                problems.append((("slos", scope, name), "sets no objective; give e.g. "
                                 f"ttft_p99: 2s, or remove the {scope[:-1]}"))
    return problems


def _check_teams(scenario: Scenario) -> list[tuple[Loc, str]]:
    """A stream's team against its API key's; budgets in dollars against prices."""
    problems: list[tuple[Loc, str]] = []
    gw = scenario.gateway
    for name, stream in scenario.workload.streams.items():
        here = ("workload", "streams", name)
        if stream.api_key is not None and not gw.keys:
            problems.append((here + ("api_key",), "the stream sends an API key but the "
                             "gateway checks none (gateway.keys is empty): add the key there "
                             "or remove api_key"))
        key = gw.keys.get(stream.api_key) if stream.api_key is not None else None
        # unknown, missing or revoked keys, and teams a served name does not allow, are
        # modelled on purpose (401s and 403s cost no GPU time; an intruder's stolen key
        # loads the gateway only): a stream all of whose requests are refused is allowed
        # team "default" is what an unset team reads as: the key's team then applies
        if key is not None and stream.team not in ("default", key.team):
            problems.append((("workload", "streams", name, "team"), f"the stream says team "
                             f"'{stream.team}' but its API key '{stream.api_key}' belongs to "
                             f"'{key.team}': the gateway bills the key's team; give one"))
    problems.extend(_limits_pass_a_request(scenario))
    priced = any(m.usd_per_million_input_tokens > 0 or m.usd_per_million_output_tokens > 0
                 for m in gw.models.values())
    for team, limits in gw.teams.items():
        if limits.budget is not None and limits.budget.usd is not None and not priced:
            problems.append((("gateway", "teams", team, "budget", "usd"), "a budget in "
                             "dollars, but no served model has a price (gateway.models.<name>"
                             ".usd_per_million_input_tokens / _output_tokens): nothing would "
                             "ever be spent; give prices or budget in tokens"))
    return problems
