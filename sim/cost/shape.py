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
    # Σ over all sequences of context + new tokens: the keys an engine that attends over
    # the whole packed batch reads. None: decode_kv_tokens + prefill tokens (see kv_read)
    kv_read_tokens: ArrayLike | None = None

    def kv_read(self) -> ArrayLike:
        if self.kv_read_tokens is not None:
            return self.kv_read_tokens
        return default_kv_read(self.num_tokens, self.num_seqs, self.decode_kv_tokens)

    @staticmethod
    def prefill_work(chunk_tokens: ArrayLike, context_before_tokens: ArrayLike) -> ArrayLike:
        """Attention work of a prefill chunk: each new token attends to the
        cached context plus, on average, half the chunk (causal mask)."""
        return chunk_tokens * (context_before_tokens + chunk_tokens / 2.0)


def default_kv_read(num_tokens: ArrayLike, num_seqs: ArrayLike,
                    decode_kv_tokens: ArrayLike) -> ArrayLike:
    """Keys read by a packed batch when the scheduler does not count them: the decode
    contexts plus the prefill tokens (a prefill chunk's earlier context is not known
    here). Exact for decode-only steps and for prompts prefilled whole."""
    prefill_tokens = np.maximum(np.asarray(num_tokens) - np.asarray(num_seqs), 0.0) + np.where(
        np.asarray(decode_kv_tokens) > 0, 0.0, np.minimum(np.asarray(num_seqs), 1.0))
    return decode_kv_tokens + prefill_tokens


@dataclass(frozen=True)
class StepCost:
    """Duration and work of one or many iterations (whole replica, all TP shards)."""

    time_s: ArrayLike
    flops: ArrayLike
    bytes: ArrayLike

    def total(self) -> tuple[float, float, float]:
        return (float(np.sum(self.time_s)), float(np.sum(self.flops)), float(np.sum(self.bytes)))
