"""The shape of one engine iteration: all the cost model needs to know.

Fields may be scalars or equal-length numpy arrays, so a replica can ask for
the times of many iterations at once (fast-forward over identical decode
steps, or a whole request under the ``single`` scheduler).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ArrayLike = float | np.ndarray


@dataclass(frozen=True)
class BatchShape:
    num_tokens: ArrayLike           # new tokens this step: prefill chunks + decode tokens
    num_seqs: ArrayLike             # sequences in the batch
    prefill_attn_work: ArrayLike    # Σ over prefill chunks of chunk·(context_before + chunk/2)
    decode_kv_tokens: ArrayLike     # Σ over decoding sequences of their context length

    @staticmethod
    def prefill_work(chunk_tokens: ArrayLike, context_before_tokens: ArrayLike) -> ArrayLike:
        """Attention work of a prefill chunk: each new token attends to the
        cached context plus, on average, half the chunk (causal mask)."""
        return chunk_tokens * (context_before_tokens + chunk_tokens / 2.0)


@dataclass(frozen=True)
class StepCost:
    """Duration and work of one or many iterations (whole replica, all TP shards)."""

    time_s: ArrayLike
    flops: ArrayLike
    bytes: ArrayLike

    def total(self) -> tuple[float, float, float]:
        return (float(np.sum(self.time_s)), float(np.sum(self.flops)), float(np.sum(self.bytes)))
