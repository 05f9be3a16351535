"""A step with an engine's host time: the GPU step of a cost model plus the host's work.

A step's GPU time is the cost model's step less its host terms (``CostModel.host_terms``:
the kernel tables time GPU work only). The engine's host time per step is
``host = (constant + per_seq x sequences) / multi_step`` (a multi-step block pays it once
per block). A synchronous engine runs it between GPU steps:

    step = gpu + host

An overlapping engine (one step ahead) prepares step k+1 while step k runs, so a step
lasts the longer of the two:

    step = max(gpu, host)

Work counters (FLOPs, bytes) are the GPU step's. A fixed decode batch's host time is the
same every step, so a fast-forwarded run stays linear when the model's is, except where
an overlapped run's GPU step crosses the host time (then its steps are evaluated).
"""
from __future__ import annotations

import numpy as np

from sim.cost.base import CostModel, DecodeRun, InnerTerms
from sim.cost.shape import ArrayLike, BatchShape
from sim.cost.steps import LinearStepEnds, StepEnds


class EngineHostCost(InnerTerms, CostModel):
    def __init__(self, inner: CostModel, host_constant_s: float, host_per_seq_s: float,
                 overlap: bool, multi_step: int = 1) -> None:
        self.inner = inner
        self.num_layers = inner.num_layers
        self.tp = inner.tp
        self.after_idle_s = inner.after_idle_s
        self.measures_engine = inner.measures_engine
        self.overlap = overlap
        self.decode_time_linear = inner.decode_time_linear and not overlap
        own_c, own_s, _ = inner.host_terms()
        self._own_c, self._own_s = own_c, own_s          # the model's host terms, taken out
        self._c = host_constant_s / multi_step
        self._s = host_per_seq_s / multi_step

    def __getattr__(self, name: str):
        # peak figures and anything else the results read come from the model itself
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def label(self) -> str:
        return self.inner.label

    def host_terms(self) -> tuple[float, float, bool]:
        return self._c, self._s, True

    def _combine(self, gpu: ArrayLike, num_seqs: ArrayLike) -> ArrayLike:
        host = self._c + self._s * num_seqs
        if self.overlap:
            return np.maximum(gpu, host)
        return gpu + host

    # -- the model's own terms, its host part taken out of the overhead ------------------
    def overhead_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self.inner.overhead_s(num_seqs) - (self._own_c + self._own_s * num_seqs)

    def work(self, shape: BatchShape):
        return self.inner.work(shape)

    def decode_work(self, num_seqs: int, kv_tokens_first: float
                    ) -> tuple[float, float, float, float]:
        return self.inner.decode_work(num_seqs, kv_tokens_first)

    # -- steps ---------------------------------------------------------------------------
    def step_time_s(self, shape: BatchShape) -> ArrayLike:
        n = shape.num_seqs
        gpu = self.inner.step_time_s(shape) - (self._own_c + self._own_s * n)
        return self._combine(gpu, n)

    def step_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float, kv_read_tokens: float | None = None,
                    sequences: float | None = None) -> tuple[float, float, float]:
        t, flops, moved = self.inner.step_scalar(num_tokens, num_seqs, prefill_attn_work,
                                                 decode_kv_tokens, kv_read_tokens, sequences)
        gpu = t - (self._own_c + self._own_s * num_seqs)
        host = self._c + self._s * num_seqs
        if self.overlap:
            return (gpu if gpu > host else host), flops, moved
        return gpu + host, flops, moved

    def decode_run_s(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> np.ndarray:
        n = float(num_seqs)
        times = self.inner.decode_run_s(num_seqs, kv_tokens_first, num_steps)
        own = self._own_c + self._own_s * n
        host = self._c + self._s * n
        if not self.overlap:
            return times + (host - own)
        if times[0] - own >= host and times[-1] >= times[0]:
            return times - own             # (a decode run's steps only grow) host hidden
        return np.maximum(times - own, host)

    def decode_run(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> DecodeRun:
        if not self.inner.decode_time_linear:
            # its step times from ``decode_run_s`` (the model's own pass over the run)
            ends = StepEnds(np.cumsum(
                self.decode_run_s(num_seqs, kv_tokens_first, num_steps)).tolist())
            return DecodeRun(ends, float(ends[num_steps - 1]), float(num_seqs),
                             *self.inner.decode_work(num_seqs, kv_tokens_first))
        # a linear model's run in closed form (``LinearStepEnds``): the host time is the
        # same every step, so only its first step moves, unless an overlapped run's GPU
        # step crosses the host time (then its steps are evaluated)
        run = self.inner.decode_run(num_seqs, kv_tokens_first, num_steps)
        n = float(num_seqs)
        inner_ends = run.step_end_s
        gpu0 = inner_ends.first - (self._own_c + self._own_s * n)
        slope = inner_ends.slope
        host = self._c + self._s * n
        if not self.overlap:
            ends = LinearStepEnds(gpu0 + host, slope, num_steps)
        elif gpu0 >= host and slope >= 0.0:
            ends = LinearStepEnds(gpu0, slope, num_steps)
        elif gpu0 + slope * (num_steps - 1) <= host and slope >= 0.0:
            ends = LinearStepEnds(host, 0.0, num_steps)
        else:
            ends = StepEnds(np.cumsum(
                self.decode_run_s(num_seqs, kv_tokens_first, num_steps)).tolist())
        run.step_end_s, run.duration_s = ends, float(ends[num_steps - 1])
        return run


def with_engine_host(cost: CostModel, preset, pp: int = 1) -> CostModel:
    """``cost`` with the engine preset's host time per step, unless the model's own host
    terms stay (written in the scenario, or measured on a whole engine) and the engine
    is synchronous without multi-step, or the pool is pipelined (its stages keep the
    model's host terms, once per micro-batch)."""
    if pp > 1:
        return cost
    own_c, own_s, keep = cost.host_terms()
    if keep and cost.measures_engine:
        return cost
    c, s = (own_c, own_s) if keep else (preset.host_constant_s, preset.host_per_seq_s)
    if keep and not preset.host_overlap and preset.multi_step == 1:
        return cost
    native = getattr(cost, "with_engine_host", None)
    if native is not None:
        # a model that prices host time in its own step arithmetic (no wrapper's call
        # per step on the hot path)
        return native(c / preset.multi_step, s / preset.multi_step, preset.host_overlap)
    return EngineHostCost(cost, c, s, preset.host_overlap, preset.multi_step)
