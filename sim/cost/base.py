"""The step-time cost model interface shared by roofline and calibrated sources.

step_time = overhead(num_seqs)
          + layers · [dense(num_tokens) + tp_comm(num_tokens)
                      + attn_prefill(prefill_attn_work) + attn_decode(decode_kv_tokens)]
          + lm_head(num_seqs) + engine(shape)

A source implements the five terms (each vectorised over numpy arrays, in
seconds for one layer on one tensor-parallel shard) and the work counters
used for MFU/MBU; ``step_sum`` adds them up, for the vectorised path here and
for each source's scalar path (the simulator's hot path) alike, so a calibrated
table and the datasheet roofline are combined identically.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from sim.config.common import StrictModel
from sim.cost.shape import ArrayLike, BatchShape, StepCost
from sim.cost.steps import LinearStepEnds, StepEnds


# A step that starts after the engine sat idle this long may cost more (``after_idle_s``).
IDLE_AFTER_S = 0.1


def step_sum(overhead: ArrayLike, num_layers: float, dense: ArrayLike, tp_comm: ArrayLike,
             attn_prefill: ArrayLike, attn_decode: ArrayLike, lm_head: ArrayLike,
             engine: ArrayLike = 0.0) -> ArrayLike:
    """A step's seconds from its terms: the one sum every cost model uses, on plain floats
    (the simulator's hot path) and on numpy arrays alike, added in one order so both give
    the same bits."""
    return (overhead + num_layers * (dense + tp_comm + attn_prefill + attn_decode) + lm_head
            + engine)



class CostModelConfigBase(StrictModel):
    """The config every cost model's ``type:`` block extends: what the checks may ask of
    a cost model before it is built, without naming it. A member overrides the answers
    it has."""

    # measured on one model: a second model on the pool's GPUs (a draft) cannot use it
    one_model: ClassVar[bool] = False

    def problems(self, pool, model, files) -> list[tuple[tuple, str]]:
        """What it finds wrong with ``pool`` (a PoolConfig) serving ``model``, reading
        its data files through ``files`` (None: the scenario has no file): (field under
        the pool, message) of each problem."""
        return []

    def profile_file(self) -> str | None:
        """The data file it reads, as the scenario names it (None: none)."""
        return None

class CostModel(ABC):
    num_layers: int
    tp: int
    # Seconds added to a step that starts after at least IDLE_AFTER_S with no step running
    # (caches gone cold, clocks down); measured only for a real engine (calibrated profile).
    after_idle_s: float = 0.0
    # Whether a decode-only step's time is linear in the KV tokens it reads
    # (true of the roofline); fast-forward then needs no per-step evaluation.
    decode_time_linear: bool = False
    # Whether the step times were measured on a whole serving engine (a calibrated profile
    # with engine terms): the engine's own front end is then in them, not added again.
    measures_engine: bool = False

    @property
    def label(self) -> str:
        """Which cost model this is, as the summary reports it."""
        return type(self).__name__

    @abstractmethod
    def overhead_s(self, num_seqs: ArrayLike) -> ArrayLike: ...

    @abstractmethod
    def dense_s(self, num_tokens: ArrayLike) -> ArrayLike: ...

    @abstractmethod
    def attn_prefill_s(self, prefill_attn_work: ArrayLike) -> ArrayLike: ...

    @abstractmethod
    def attn_decode_s(self, decode_kv_tokens: ArrayLike) -> ArrayLike: ...

    @abstractmethod
    def tp_comm_s(self, num_tokens: ArrayLike) -> ArrayLike: ...

    @abstractmethod
    def lm_head_s(self, num_seqs: ArrayLike) -> ArrayLike: ...

    @abstractmethod
    def work(self, shape: BatchShape) -> tuple[ArrayLike, ArrayLike]:
        """(FLOPs, bytes moved) of the step(s) over all GPUs of the replica."""

    def host_terms(self) -> tuple[float, float, bool]:
        """(seconds per step, seconds per sequence) of ``overhead_s`` that are host-side
        work (the rest of it is GPU work), and whether the scenario wrote them: then they
        stay the host terms under an engine preset, whose own replace them otherwise
        (``sim/cost/engine_host.py``). All of the overhead unless a model says otherwise;
        a model whose overhead is not of that form says (0, 0, True): left as it is."""
        return 0.0, 0.0, True

    def engine_s(self, shape: BatchShape) -> ArrayLike:
        """Seconds a particular serving engine adds to the model's own step (its
        host-side work, an attention kernel that spans the packed batch); zero unless
        a calibrated profile measured them."""
        return 0.0

    def engine_host_s(self, shape: BatchShape) -> ArrayLike:
        """The part of ``engine_s`` that is host-side work, once a step whatever the
        layers (a pipeline pays it once a micro-batch, on no stage); the rest is GPU
        work over the layers. All of it unless a model says otherwise."""
        return self.engine_s(shape)

    def step_time_s(self, shape: BatchShape) -> ArrayLike:
        return step_sum(self.overhead_s(shape.num_seqs), self.num_layers,
                        self.dense_s(shape.num_tokens), self.tp_comm_s(shape.num_tokens),
                        self.attn_prefill_s(shape.prefill_attn_work),
                        self.attn_decode_s(shape.decode_kv_tokens),
                        self.lm_head_s(shape.num_seqs), self.engine_s(shape))

    def step(self, shape: BatchShape) -> StepCost:
        flops, bytes_moved = self.work(shape)
        return StepCost(time_s=self.step_time_s(shape), flops=flops, bytes=bytes_moved)

    def step_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float, kv_read_tokens: float | None = None,
                    sequences: float | None = None) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of one step; sources may override with plain floats.

        ``num_seqs`` is the step's rows (the logits the LM head computes, the per-sequence
        overhead); ``sequences``, where given, is how many sequences those rows belong to
        (fewer under speculative decoding, a verify pass computing one row a draft).
        Only the pipeline wrapper uses it, to count its micro-batches: one sequence's rows
        are never split over several."""
        shape = BatchShape(np.array([num_tokens], dtype=np.float64),
                           np.array([num_seqs], dtype=np.float64),
                           np.array([prefill_attn_work], dtype=np.float64),
                           np.array([decode_kv_tokens], dtype=np.float64),
                           None if kv_read_tokens is None
                           else np.array([kv_read_tokens], dtype=np.float64))
        cost = self.step(shape)
        return (float(np.asarray(cost.time_s).reshape(-1)[0]),
                float(np.asarray(cost.flops).reshape(-1)[0]),
                float(np.asarray(cost.bytes).reshape(-1)[0]))

    def decode_run(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> "DecodeRun":
        """``num_steps`` consecutive decode-only steps of a fixed batch.

        Step i (0-based) reads ``kv_tokens_first + i·num_seqs`` KV tokens:
        every sequence grows by one token per step. The step times are
        evaluated together (vectorised); FLOPs and bytes are linear in the
        KV tokens read, so two evaluations give them for any prefix of steps.
        Used by fast-forward.
        """
        n = float(num_seqs)
        t0, f0, b0 = self.step_scalar(n, n, 0.0, kv_tokens_first)
        t1, f1, b1 = self.step_scalar(n, n, 0.0, kv_tokens_first + n)
        if self.decode_time_linear:
            ends = LinearStepEnds(t0, t1 - t0, num_steps)
        else:
            ends = StepEnds(np.cumsum(
                self.decode_run_s(num_seqs, kv_tokens_first, num_steps)).tolist())
        return DecodeRun(step_end_s=ends, duration_s=float(ends[num_steps - 1]),
                         tokens_per_step=n, flops_first=f0,
                         flops_slope=f1 - f0, bytes_first=b0, bytes_slope=b1 - b0)

    def decode_work(self, num_seqs: int, kv_tokens_first: float
                    ) -> tuple[float, float, float, float]:
        """(FLOPs of the first step, FLOPs added a step, bytes of the first step, bytes
        added a step) of ``decode_run``: linear in the KV tokens read."""
        n = float(num_seqs)
        _, f0, b0 = self.step_scalar(n, n, 0.0, kv_tokens_first)
        _, f1, b1 = self.step_scalar(n, n, 0.0, kv_tokens_first + n)
        return f0, f1 - f0, b0, b1 - b0

    def decode_run_s(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> np.ndarray:
        """Times of the steps of ``decode_run`` (not cumulated)."""
        n = float(num_seqs)
        steps = np.arange(num_steps, dtype=np.float64)
        shape = BatchShape(num_tokens=np.full(num_steps, n), num_seqs=np.full(num_steps, n),
                           prefill_attn_work=np.zeros(num_steps),
                           decode_kv_tokens=kv_tokens_first + steps * n)
        return np.asarray(self.step_time_s(shape), dtype=np.float64)


class InnerTerms:
    """The step terms (one layer, one shard) of a model that wraps another
    (``self.inner``), as the inner model gives them; put before ``CostModel`` in a
    wrapper's bases."""

    inner: CostModel

    def dense_s(self, num_tokens: ArrayLike) -> ArrayLike:
        return self.inner.dense_s(num_tokens)

    def attn_prefill_s(self, prefill_attn_work: ArrayLike) -> ArrayLike:
        return self.inner.attn_prefill_s(prefill_attn_work)

    def attn_decode_s(self, decode_kv_tokens: ArrayLike) -> ArrayLike:
        return self.inner.attn_decode_s(decode_kv_tokens)

    def tp_comm_s(self, num_tokens: ArrayLike) -> ArrayLike:
        return self.inner.tp_comm_s(num_tokens)

    def lm_head_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self.inner.lm_head_s(num_seqs)

    def engine_s(self, shape: BatchShape) -> ArrayLike:
        return self.inner.engine_s(shape)

    def engine_host_s(self, shape: BatchShape) -> ArrayLike:
        return self.inner.engine_host_s(shape)


class DecodeRun:
    """Cumulative step ends and linear work of a fast-forwarded decode run."""

    __slots__ = ("step_end_s", "duration_s", "tokens_per_step", "flops_first", "flops_slope",
                 "bytes_first", "bytes_slope")

    def __init__(self, step_end_s, duration_s, tokens_per_step, flops_first, flops_slope,
                 bytes_first, bytes_slope) -> None:
        self.step_end_s = step_end_s
        self.duration_s = duration_s             # the last step's end
        self.tokens_per_step = tokens_per_step
        self.flops_first = flops_first
        self.flops_slope = flops_slope
        self.bytes_first = bytes_first
        self.bytes_slope = bytes_slope
