"""Active spans: the window a load generator measures a benchmark over.

vLLM's ``bench serve`` reports "Benchmark duration" from its first request sent to its
last response received and divides the completed requests and their tokens by it;
GuideLLM's benchmark duration likewise runs from its first request's start to its last
request's end. The run's *active span* here is the same: from the first request's
arrival to the last request's terminal event (completed or refused; a request still open
when the run was cut off ends with the run). A stream's own active span is the same over
its requests only. A closed-loop stream whose requests all end early therefore has a
span shorter than the scenario's ``duration``, over which its rates and its cost per
token are what a load generator would report; an open-loop stream's span is about the
arrival window.

Billed GPU time inside a span is exact: each replica's billed interval (requested to
released, or the run's end) is kept by its pool, and its overlap with the span summed.
A replica computes only for a request in flight, so all busy time, FLOPs and bytes of
a run lie inside the run's active span, and a pool's utilisation over it is its whole
busy time over the GPU time billed inside it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.entities.request import Status
from sim.recording.accounts import PoolAccount
from sim.output.columns import Table


@dataclass(frozen=True)
class Span:
    start_s: float
    end_s: float

    @property
    def span_s(self) -> float:
        return max(self.end_s - self.start_s, 0.0)

    def as_dict(self) -> dict[str, float]:
        return {"start_s": self.start_s, "end_s": self.end_s, "span_s": self.span_s}


def _ends(requests: Table, run_end_s: float) -> np.ndarray:
    """Each request's terminal time: its finish (completed or refused), else the run's end
    (still open at the cut-off)."""
    ends = np.where(requests["status"] == Status.UNFINISHED, run_end_s, requests["finish_s"])
    return np.where(np.isnan(ends), run_end_s, ends)


def active_span(requests: Table, run_end_s: float) -> Span | None:
    """First arrival to last terminal event of ``requests`` (None: no request), within
    the run: a token's hop to the client (an engine preset's ``token_hop_s``) may stamp
    the last finish just after the run's last event, which ends the run and its bill."""
    if not len(requests):
        return None
    return Span(float(requests["arrival_s"].min()),
                min(float(_ends(requests, run_end_s).max()), run_end_s))


def billed_gpu_s_within(pool: PoolAccount, span: Span | None) -> float:
    """GPU-seconds the pool was billed inside ``span``: each replica's billed interval's
    overlap with it, times the GPUs a replica holds."""
    if span is None or not pool.billing_intervals_s:
        return 0.0
    lo, hi = np.asarray(pool.billing_intervals_s, dtype=np.float64).T
    overlap = np.minimum(hi, span.end_s) - np.maximum(lo, span.start_s)
    return float(np.clip(overlap, 0.0, None).sum()) * pool.gpus_per_replica


def rates(done: Table, window: str, span_s: float) -> dict:
    """Completed requests and their tokens per second over a window of ``span_s``,
    named (``window``) beside the figures."""
    return _rates(len(done), int(done["prompt_tokens"].sum()),
                  int(done["output_tokens"].sum()), window, span_s)


def _rates(completed: int, input_tokens: int, output_tokens: int, window: str,
           span_s: float) -> dict:
    def per_s(n: float) -> float:
        return n / span_s if span_s > 0 else 0.0
    return {"window": window, "span_s": span_s, "requests_per_s": per_s(completed),
            "input_tokens_per_s": per_s(input_tokens),
            "output_tokens_per_s": per_s(output_tokens)}


def pool_window(pool: dict) -> dict:
    """A summary's pool figures over the run's active span, as its rates are (the pool's
    own, over the whole run, in a summary written before active spans)."""
    return pool.get("active_span") or pool


def _sampled_mean(samples: Table, column: str, span: Span | None) -> float | None:
    """The mean of a pool's time-series ``column`` over the samples inside ``span`` (None
    where none fell inside it, not a made-up 0)."""
    if span is None or not len(samples):
        return None
    t = samples["time_s"]
    inside = (t >= span.start_s) & (t <= span.end_s)
    return float(samples[column][inside].mean()) if inside.any() else None


def pool_in_span(pool: PoolAccount, span: Span | None, samples: Table) -> dict:
    """A pool's billed GPU time, cost, mean replicas, utilisation and mean KV use and
    queue inside the run's active span (all its busy time, FLOPs and bytes lie inside
    it; ``samples``: the pool's rows of the time series)."""
    span_s = span.span_s if span is not None else 0.0
    gpu_s = billed_gpu_s_within(pool, span)
    usage = pool.usage
    return {
        "kv_util_mean": _sampled_mean(samples, "kv_util", span),
        "queue_mean": _sampled_mean(samples, "queued", span),
        "span_s": span_s,
        "gpu_hours": gpu_s / 3600.0,
        "cost_usd": gpu_s / 3600.0 * pool.price_per_gpu_hour,
        "replicas_mean": gpu_s / pool.gpus_per_replica / span_s if span_s > 0 else 0.0,
        "busy_frac": min(usage.busy_total_s * pool.gpus_per_replica / gpu_s, 1.0)
        if gpu_s > 0 else 0.0,
        "mfu": usage.flops_total / (gpu_s * pool.peak_flops_per_gpu) if gpu_s > 0 else 0.0,
        "mbu": usage.bytes_total / (gpu_s * pool.peak_bytes_per_s_per_gpu)
        if gpu_s > 0 else 0.0,
    }


def stream_figures(requests: Table, stream_names: tuple[str, ...], run_end_s: float,
                   span_cost: np.ndarray) -> dict[str, dict]:
    """Per stream: its own active span, its requests, its rates over that span and its
    share of the fleet's cost over the run's active span (``span_cost``: each request's
    share, by the tokens it had computed, as the teams' costs are shared). Columns are
    read once and masked per stream (a table's rows would copy every column)."""
    out: dict[str, dict] = {}
    if not len(requests):
        return out
    streams = requests["stream"]
    arrival, ends = requests["arrival_s"], _ends(requests, run_end_s)
    done = np.asarray(requests["status"] == Status.COMPLETED, dtype=bool)
    prompt, output = requests["prompt_tokens"], requests["output_tokens"]
    for name in stream_names:
        mine = np.asarray(streams == name, dtype=bool)
        if not mine.any():
            continue
        span = Span(float(arrival[mine].min()), float(ends[mine].max()))
        ok = mine & done
        cost = float(span_cost[mine].sum())
        out_tokens = int(output[ok].sum())
        out[str(name)] = {
            "active_span": span.as_dict(),
            "requests": int(mine.sum()),
            "completed": int(ok.sum()),
            "throughput": _rates(int(ok.sum()), int(prompt[ok].sum()), out_tokens,
                                 "stream_active_span", span.span_s),
            # the fleet's bill over the run's active span, shared by tokens computed (a
            # stream's own span overlaps others': no bill is its alone)
            "span_cost_share_usd": cost,
            "usd_per_million_output_tokens": cost / out_tokens * 1e6 if out_tokens else None,
        }
    return out
