"""The step-time cost model interface shared by roofline and calibrated sources.

step_time = overhead(num_seqs)
          + layers · [dense(num_tokens) + attn_prefill(prefill_attn_work)
                      + attn_decode(decode_kv_tokens) + tp_comm(num_tokens)]
          + lm_head(num_seqs)

A source implements the five terms (each vectorised over numpy arrays, in
seconds for one layer on one tensor-parallel shard) and the work counters
used for MFU/MBU; this class adds them up. Keeping the sum here means a
calibrated table and the datasheet roofline are combined identically.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from sim.cost.shape import ArrayLike, BatchShape, StepCost


class CostModel(ABC):
    num_layers: int
    tp: int

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

    def step_time_s(self, shape: BatchShape) -> ArrayLike:
        per_layer = (self.dense_s(shape.num_tokens)
                     + self.attn_prefill_s(shape.prefill_attn_work)
                     + self.attn_decode_s(shape.decode_kv_tokens)
                     + self.tp_comm_s(shape.num_tokens))
        return (self.overhead_s(shape.num_seqs) + self.num_layers * per_layer
                + self.lm_head_s(shape.num_seqs))

    def step(self, shape: BatchShape) -> StepCost:
        flops, bytes_moved = self.work(shape)
        return StepCost(time_s=self.step_time_s(shape), flops=flops, bytes=bytes_moved)

    def decode_run_s(self, num_seqs: int, kv_tokens_first: int, num_steps: int) -> np.ndarray:
        """Times of ``num_steps`` consecutive decode-only steps of a fixed batch.

        Step i (0-based) reads ``kv_tokens_first + i·num_seqs`` KV tokens:
        every sequence grows by one token per step. Used by fast-forward.
        """
        steps = np.arange(num_steps, dtype=np.float64)
        shape = BatchShape(num_tokens=np.full(num_steps, float(num_seqs)),
                           num_seqs=np.full(num_steps, float(num_seqs)),
                           prefill_attn_work=np.zeros(num_steps),
                           decode_kv_tokens=kv_tokens_first + steps * num_seqs)
        return np.asarray(self.step_time_s(shape), dtype=np.float64)
