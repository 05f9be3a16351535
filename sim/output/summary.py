"""summary.json: the headline figures of one run, as plain JSON types (from the run's
numpy columns, :mod:`sim.output.columns`)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from sim.schedulers.gaps import GapHistogram
from sim.entities.request import Status
from sim.recording.accounts import RunAccount
from sim.output.columns import Coded, Table
from sim.output.slo import slo_section
from sim.output.spans import active_span, pool_in_span, rates, stream_figures

# the percentiles of each latency, named as GuideLLM names them (p999: the 99.9th)
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def _stats(values: np.ndarray) -> dict[str, float | None]:
    v = values[~np.isnan(values)]
    if len(v) == 0:
        return {"mean": None, **{name: None for name in PERCENTILES}}
    pct = np.percentile(v, list(PERCENTILES.values()))
    return {"mean": float(v.mean()), **{name: float(x) for name, x in zip(PERCENTILES, pct)}}


def _itl(done: Table, gaps: GapHistogram) -> dict[str, float | None]:
    """Inter-token latency as vLLM's ``bench serve`` pools it (every gap between two
    consecutive streamed chunks of every request): its exact mean, the gaps' total time
    (first token to last, per request) over their number, and the longest gap, over
    ``done``; its percentiles read from the run's pooled gaps (``gaps``: log-spaced
    bins, within 0.5% of the true gap; README)."""
    gaps_n = (done["output_tokens"] - 1).astype(np.float64)
    has = gaps_n > 0
    total_gaps = float(gaps_n[has].sum())
    gap_s = float((done["finish_s"][has] - done["first_token_s"][has]).sum())
    longest = done["max_itl_s"][has]
    longest = longest[~np.isnan(longest)]
    return {"mean": gap_s / total_gaps if total_gaps else None,
            **{name: gaps.percentile(q) for name, q in PERCENTILES.items()},
            "max": float(longest.max()) if len(longest) else None}


def _in_ms(latency_s: dict) -> dict:
    """The latencies in milliseconds, as load generators print them (vLLM, GuideLLM)."""
    return {name: {k: None if v is None else v * 1e3 for k, v in stats.items()}
            for name, stats in latency_s.items()}


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)


@dataclass(frozen=True)
class EarlierWork:
    """Per request (in the table's order): a pool that worked on it before its last ("" if
    none), the tokens computed there, and how many of those its own totals still hold."""

    pool: Coded                 # pool names, compared by code
    tokens: np.ndarray          # int64
    carried: np.ndarray         # int64


def attribute_cost(requests: Table, pool_cost: dict[str, float],
                   earlier: EarlierWork | None = None) -> np.ndarray:
    """Each request's share of each pool's cost, by the tokens it had computed there:
    prompt less cache hits, plus output, on its last pool (a refused request computed
    nothing there), and the tokens of its work on an earlier pool (a disaggregated
    prefill, a cascade's first attempt) on that one."""
    work = (requests["prompt_tokens"] - requests["cached_prompt_tokens"]
            + requests["output_tokens"]).astype(np.float64)
    if earlier is not None:
        work = work - earlier.carried
    work = np.where(requests["status"] != Status.REJECTED, work, 0.0)
    pools = requests["pool"]               # compared by code, not as strings
    before = np.zeros(len(requests)) if earlier is None else earlier.tokens.astype(np.float64)
    out = np.zeros(len(requests))
    for name, cost in pool_cost.items():
        here = pools == name
        there = earlier.pool == name if earlier is not None \
            else np.zeros(len(out), bool)
        total = work[here].sum() + before[there].sum()
        if total > 0:
            out[here] += cost * work[here] / total
            out[there] += cost * before[there] / total
    return out


def _prompt_pools(requests: Table, earlier: EarlierWork | None) -> Coded:
    """Per request, the pool that computed its prompt: its last pool, or the earlier one
    that handed it over with its prompt's KV (``carried`` tokens: disaggregation; a
    cascade's next pool starts over and computes the prompt itself)."""
    last = requests["pool"]
    handed = earlier.carried > 0 if earlier is not None else None
    if handed is None or not handed.any():
        return last
    names = list(last.names)
    names += [n for n in earlier.pool.names if n not in names]
    recode = np.array([names.index(n) for n in earlier.pool.names] + [-1])
    before = recode[np.where(earlier.pool.codes >= 0, earlier.pool.codes, -1)]
    return Coded(np.where(handed, before, last.codes), names)


def _reason_counts(reasons: Coded) -> dict[str, int]:
    """Requests per reason, by the reason's name in sorted order."""
    counts = Counter(reasons.strings())
    return {str(k): int(counts[k]) for k in sorted(counts)}


def summarise(run: RunAccount, requests: Table, ts: Table,
              earlier: EarlierWork | None = None) -> dict:
    end_s = run.end_s
    status = requests["status"]
    completed = status == Status.COMPLETED
    done = requests[completed]
    rejected = requests[status == Status.REJECTED]

    pools: dict[str, dict] = {}
    pool_cost: dict[str, float] = {}
    total_cost = 0.0
    prompt_pool = _prompt_pools(requests, earlier)
    # rates, utilisation and cost per token over the active span (spans.py), as load
    # generators measure a benchmark; the whole run's beside them, named so
    span = active_span(requests, end_s)
    span_s = span.span_s if span is not None else 0.0
    span_pool_cost: dict[str, float] = {}
    for code, name in enumerate(run.recorder.pools.names):
        pool = run.pools[name]
        usage = pool.usage
        pts = ts[ts["pool"] == name] if len(ts) else ts     # (no columns: no pools)
        gpu_s = pool.billed_gpu_s
        replicas = gpu_s / pool.gpus_per_replica / end_s if end_s > 0 else 0.0
        cost = gpu_s / 3600.0 * pool.price_per_gpu_hour
        busy_s = usage.busy_total_s
        pool_cost[name] = cost
        total_cost += cost
        # the prompt's cache hits belong to the pool that computed it (a disaggregated
        # request's prefill pool, not the decode pool its row names)
        served = requests[(prompt_pool == name) & completed]
        prompt_total = int(served["prompt_tokens"].sum())
        pools[name] = {
            "model": pool.model,
            "hardware": pool.hardware,
            "tp": pool.tp,
            "pp": pool.pp,
            "weight_dtype": pool.weight_dtype,
            "kv_dtype": pool.kv_dtype,
            "cost_model": pool.cost_model,
            "engine": pool.engine,
            "replicas_mean": replicas,
            "replicas_max": pool.replicas_max,
            "kv_blocks_per_replica": pool.kv_blocks_per_replica,
            "gpu_hours": gpu_s / 3600.0,
            "cost_usd": cost,
            "busy_frac": busy_s * pool.gpus_per_replica / gpu_s if gpu_s > 0 else 0.0,
            "mfu": usage.flops_total / (gpu_s * pool.peak_flops_per_gpu)
            if gpu_s > 0 else 0.0,
            "mbu": usage.bytes_total / (gpu_s * pool.peak_bytes_per_s_per_gpu)
            if gpu_s > 0 else 0.0,
            # means over the samples: none when no sample fell inside the run (a
            # sample_interval as long as the duration), not a made-up 0
            "kv_util_mean": float(pts["kv_util"].mean()) if len(pts) else None,
            "max_running_seqs": usage.max_seqs,
            "tokens_computed": usage.tokens_total,
            "prefix_hit_rate": float(served["cached_prompt_tokens"].sum()) / prompt_total
            if prompt_total else 0.0,
            "queue_mean": float(pts["queued"].mean()) if len(pts) else None,
            "active_span": pool_in_span(pool, span, pts),
        }
        span_pool_cost[name] = pools[name]["active_span"]["cost_usd"]

    # Each pool's billed cost is shared among its requests in proportion to the
    # tokens each had computed there (prompt less cache hits, plus output): its
    # share of the pool's GPU work. Teams' costs are the sums of their requests'.
    requests["cost_usd"] = attribute_cost(requests, pool_cost, earlier)
    teams: dict[str, dict] = {}
    warmup_s = run.scenario.warmup
    team_codes = requests["team"].codes
    for code, team in enumerate(requests["team"].names):     # the recorder's order
        rows = requests[team_codes == code]
        if not len(rows):
            continue
        st = rows["status"]
        ok = rows[st == Status.COMPLETED]
        measured = ok[ok["arrival_s"] >= warmup_s]      # latencies leave out the warm-up
        refused = st == Status.REJECTED
        teams[str(team)] = {
            "requests": int(len(rows)),
            "completed": int(len(ok)),
            "rejected": int(refused.sum()),
            "rejected_by_reason": _reason_counts(rows["reject_reason"][refused]),
            "input_tokens": int(ok["prompt_tokens"].sum()),
            "output_tokens": int(ok["output_tokens"].sum()),
            "ttft_p99_s": _num(float(np.percentile(measured["ttft_s"], 99)))
            if len(measured) else None,
            "cost_usd": float(rows["cost_usd"].sum()),
        }

    steady = done[done["arrival_s"] >= warmup_s]
    out_tokens = int(done["output_tokens"].sum())
    slo = (slo_section(requests, run.scenario.slos, warmup_s, end_s)
           if run.scenario.slos is not None else None)
    span_cost = sum(span_pool_cost.values())
    latency_s = {
        "ttft": _stats(steady["ttft_s"]),
        "tpot": _stats(steady["tpot_s"]),
        "itl": _itl(steady, run.recorder.gaps),
        "e2e": _stats(steady["e2e_s"]),
        "queue": _stats(steady["queue_s"]),
        "max_itl": _stats(steady["max_itl_s"]),
    }
    return {
        "scenario": run.scenario.name,
        **({"slo": slo} if slo is not None else {}),
        "seed": run.scenario.seed,
        "duration_s": run.scenario.duration,
        "end_s": end_s,
        "requests": {
            "arrived": int(len(requests)),
            "completed": int(len(done)),
            "rejected": _reason_counts(rejected["reject_reason"]),
            "rejected_total": int(len(rejected)),
            "in_flight_at_end": int((status == Status.UNFINISHED).sum()),
        },
        "active_span": span.as_dict() if span is not None else None,
        "latency_s": latency_s,
        "latency_ms": _in_ms(latency_s),
        "throughput": rates(done, "active_span", span_s),
        "throughput_whole_run": rates(done, "whole_run", end_s),
        "pools": pools,
        "teams": teams,
        "streams": stream_figures(requests, run.stream_names, end_s,
                                  attribute_cost(requests, span_pool_cost, earlier)),
        "cost": {
            "total_usd": total_cost,        # billed over the whole run
            # capacity no request used (a pool no stream reached, or one that served
            # nothing): in no team's cost, so that teams + unattributed = total
            "unattributed_usd": max(total_cost - float(requests["cost_usd"].sum()), 0.0),
            "active_span_usd": span_cost,   # billed inside the active span
            "usd_per_million_output_tokens": _num(span_cost / out_tokens * 1e6)
            if out_tokens else None,
            "usd_per_million_output_tokens_whole_run": _num(total_cost / out_tokens * 1e6)
            if out_tokens else None,
        },
    }
