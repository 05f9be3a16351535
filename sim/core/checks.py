"""Checks once the pools are built, before the first event: settings that pass their
own checks but would leave the run with nothing real to show (a step of hours, a cold
start longer than the run, a KV link of minutes, a stream whose every request is longer
than its pools serve). Each raises :class:`RunRefused` naming the field at fault."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.config.gateway import GatewayConfig
from sim.config.sanity import request_budget
from sim.config.scenario import Scenario

if TYPE_CHECKING:
    from sim.core.pool import Pool
    from sim.workload import RequestArrivals


# what each refusal reason of a pool's limits stands for, in the scenario's words
LIMIT_NAMES = {"exceeds_max_model_len": "its max_model_len",
               "exceeds_kv_capacity": "a replica's whole KV cache",
               "exceeds_token_budget": "max_num_batched_tokens without chunked prefill"}


MAX_STEP_S = 60.0      # no engine takes a minute for one short step: a setting is wrong
PROBE_CONTEXT_TOKENS = 1000


class RunRefused(ValueError):
    """A setting that passes its own checks but would leave the run with nothing real to
    show: a stream whose every request is too long for its pools, a step of hours."""

    def __init__(self, loc: tuple, message: str) -> None:
        super().__init__(message)
        self.loc, self.message = loc, message


def check_step_times(scenario: Scenario, pools: dict[str, Pool]) -> None:
    """Refuse a pool whose cost model makes one short step take no time, or longer than
    :data:`MAX_STEP_S` (a prefill of a 1,000-token prompt; one decode step of one
    sequence with 1,000 tokens of context), or whose new replicas could not start
    before the run ends."""
    run_s = scenario.duration + scenario.drain
    for name, pool in pools.items():
        cost = pool.cost_model
        n = PROBE_CONTEXT_TOKENS
        steps = {"a prefill of 1,000 prompt tokens": cost.step_scalar(n, 1, n * n / 2, 0)[0],
                 "a decode step of one sequence": cost.step_scalar(1, 1, 0, n)[0]}
        for what, step_s in steps.items():
            if not (0.0 < step_s <= MAX_STEP_S):
                raise RunRefused(("pools", name), (
                    f"{what} would take {step_s:.3g} s with its cost model "
                    f"({cost.label}); real engines take milliseconds: check the hardware's "
                    "flops and bandwidths, the efficiencies and overheads of the cost "
                    "model, or the calibrated profile's tables"))
        if pool.autoscaler is not None and pool.cold_start_s >= run_s:
            raise RunRefused(("pools", name, "cold_start"), (
                f"a new replica would take {pool.cold_start_s:.3g} s to start "
                "(provisioning + weights / load_bandwidth), longer than the run "
                f"({run_s:g} s with its drain): the autoscaler could never add one"))
        if pool.autoscaler is not None:
            for loc, message in pool.cfg.autoscaler.start_problems(pool.cold_start_s):
                raise RunRefused(("pools", name, "autoscaler") + loc, message)
    for served_name, served in scenario.gateway.models.items():
        split = served.disaggregated
        if split is None or split.prefill not in pools:
            continue
        spec = pools[split.prefill].spec
        transfer_s = split.link_latency + (PROBE_CONTEXT_TOKENS * spec.model.kv_bytes_per_token(
            spec.cfg.kv_dtype) / split.link_bandwidth)
        if transfer_s > MAX_STEP_S:
            raise RunRefused(
                ("gateway", "models", served_name, "disaggregated", "link_bandwidth"),
                f"sending the KV cache of a 1,000-token prompt would take "
                f"{transfer_s:.3g} s; real links take milliseconds: raise link_bandwidth "
                "or lower link_latency")


def check_servable(gateway: GatewayConfig, arrivals: RequestArrivals, stream_cfgs: list,
                   default_pools: list[str], pools: dict[str, Pool]) -> None:
    """Refuse a run in which some stream's every request is longer than each pool it
    may be sent to serves: all of them would be turned away (an error in the
    scenario, not a finding)."""
    totals = arrivals.prompt_tokens + arrivals.output_tokens
    for s, (name, cfg) in enumerate(zip(arrivals.stream_names, stream_cfgs)):
        mine = totals[arrivals.stream_index == s]
        if not len(mine):
            continue
        served = gateway.route_for(cfg.model, cfg.pool)
        entry = served.entry_pools() if served is not None else [default_pools[s]]
        shortest = int(mine.min())
        if any(shortest <= pools[p].servable_tokens() for p in entry):
            continue
        binding = {p: pools[p].binding_limit() for p in entry}
        limits = ", ".join(f"pool '{p}' at most {tokens:,} "
                           f"({LIMIT_NAMES.get(reason, 'its limits')})"
                           for p, (reason, tokens) in binding.items())
        raise RunRefused(
            ("workload", "streams", name),
            f"all {len(mine):,} of its requests are longer than its pool serves: the "
            f"shortest has {shortest:,} tokens (prompt + output), {limits}; every "
            "request would be refused: shorten the lengths or raise the limit")


def check_request_count(scenario: Scenario, arrivals: RequestArrivals) -> None:
    """The requests drawn (a trace's too, which the scenario alone does not count) against
    ``max_requests`` and this machine's memory, before anything is built for them."""
    n = len(arrivals)
    if n == 0:
        raise RunRefused(("workload", "streams"), (
            f"no stream draws a request over the run ({scenario.duration:g} s; its rates, "
            "its traces' timestamps, its conversations' context windows): every figure "
            "would be empty; raise a rate, lengthen the run or widen the context window"))
    counts = np.bincount(arrivals.stream_index, minlength=len(arrivals.stream_names))
    top = int(np.argmax(counts))
    where = ("workload", "streams", arrivals.stream_names[top])
    sent = f"the streams send {n:,} requests (stream '{arrivals.stream_names[top]}' " \
           f"{int(counts[top]):,})"
    over = request_budget(n, scenario.max_requests, "shorten the run or cut the trace",
                          max_remedy=", or cut the trace")
    if over is not None:
        raise RunRefused(where, sent + over)
    if scenario.warmup > 0 and arrivals.num_timed == n \
            and not (arrivals.arrival_s >= scenario.warmup).any():
        raise RunRefused(("warmup",), (
            f"no request arrives after the warm-up ({scenario.warmup:g} s; the last of "
            f"{n:,} arrives at {float(arrivals.arrival_s[-1]):.6g} s): every request would be "
            "left out of the latency figures: shorten the warm-up"))
