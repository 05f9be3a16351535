"""Roofline cost model from datasheet figures and efficiency factors.

Each GEMM-like term takes max(FLOPs / usable FLOP/s, bytes / usable
bandwidth): at small token counts a step is bound by reading the weights
once (shared by the whole batch, which is why batching pays), at large ones
by arithmetic. Attention over the KV cache in decode is bound by reading the
cache; prefill attention by arithmetic. Tensor parallelism divides FLOPs,
weights and KV heads by ``tp`` and adds two ring all-reduces per layer.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from sim.config.common import Fraction, Seconds, StrictModel
from sim.config.profiles import BYTES_PER_ELEMENT, HardwareSpec, ModelSpec
from sim.cost.base import CostModel, DecodeRun
from sim.cost.shape import ArrayLike, BatchShape
from sim.cost.steps import LinearStepEnds

ACTIVATION_BYTES = 2.0  # bf16 activations


class RooflineConfig(StrictModel):
    type: Literal["roofline"] = "roofline"
    flops_efficiency: Fraction = Field(0.7, description="Share of peak FLOP/s reached by GEMMs")
    bandwidth_efficiency: Fraction = Field(
        0.85, description="Share of peak memory bandwidth reached by weight and KV reads")
    attention_efficiency: Fraction = Field(
        0.5, description="Share of peak FLOP/s reached by prefill attention kernels")
    interconnect_efficiency: Fraction = Field(
        0.7, description="Share of interconnect bandwidth reached by all-reduce")
    step_overhead: Seconds = Field(
        1e-3, description="Fixed CPU/launch overhead per iteration (scheduler, sampling)")
    per_seq_overhead: Seconds = Field(
        5e-6, description="Extra per-sequence overhead per iteration (input prep, sampling)")


class RooflineCostModel(CostModel):
    decode_time_linear = True   # decode attention is the only term that varies with KV read

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, tp: int,
                 weight_dtype: str, kv_dtype: str, cfg: RooflineConfig) -> None:
        self.cfg = cfg
        self.model = model
        self.tp = tp
        self.num_layers = model.num_layers
        w_bytes = BYTES_PER_ELEMENT[weight_dtype]
        kv_bytes = BYTES_PER_ELEMENT[kv_dtype]
        self._gemm_flops_per_s = hardware.compute_flops_per_s(weight_dtype) * cfg.flops_efficiency
        self._attn_flops_per_s = hardware.flops["bf16"] * cfg.attention_efficiency
        self._bw_bytes_per_s = hardware.hbm_bandwidth * cfg.bandwidth_efficiency
        self._link_bytes_per_s = hardware.interconnect_bandwidth * cfg.interconnect_efficiency
        self._allreduce_latency_s = hardware.allreduce_latency
        # per layer, per shard
        self._attn_weight_bytes = model.attn_params_per_layer * w_bytes / tp
        self._expert_weight_bytes = model.expert_params * w_bytes / tp
        self._active_flops_per_token = 2.0 * model.active_params_per_layer / tp
        self._attn_flops_per_work = 4.0 * model.num_heads * model.head_dim / tp
        self._kv_bytes_per_token_layer = 2.0 * model.num_kv_heads * model.head_dim * kv_bytes / tp
        self._head_flops_per_seq = 2.0 * model.hidden_size * model.vocab_size / tp
        # the LM head stays in bf16 in quantised checkpoints, and runs at that rate
        head_dtype = model.edge_dtype(weight_dtype)
        self._head_bytes = (model.hidden_size * model.vocab_size
                            * BYTES_PER_ELEMENT[head_dtype] / tp)
        self._head_flops_per_s = hardware.compute_flops_per_s(head_dtype) * cfg.flops_efficiency
        self._peak_flops = hardware.compute_flops_per_s(weight_dtype)
        self._peak_bw = hardware.hbm_bandwidth
        # a decode-only step of n sequences is its cost at no KV plus these per KV token read
        layers = self.num_layers
        self._decode_per_kv = (layers * self._kv_bytes_per_token_layer / self._bw_bytes_per_s,
                               layers * 4.0 * model.num_heads * model.head_dim,
                               layers * self._kv_bytes_per_token_layer * tp)
        self._decode_at_no_kv: dict[int, tuple[float, float, float]] = {}
        # the same terms as plain floats for step_scalar (no attribute chains there)
        self._act_bytes_per_token = 4.0 * model.hidden_size * ACTIVATION_BYTES
        self._tp_latency_s = 2.0 * self._allreduce_latency_s if tp > 1 else 0.0
        self._tp_s_per_token = (2.0 * 2.0 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES
                                / self._link_bytes_per_s)
        self._head_memory_s = self._head_bytes / self._bw_bytes_per_s
        self._overheads_s = (cfg.step_overhead, cfg.per_seq_overhead)
        self._num_experts = model.num_experts
        self._dense_weight_bytes = self._attn_weight_bytes + self._expert_weight_bytes

    @property
    def label(self) -> str:
        return "roofline"

    # -- terms (seconds, one layer, one shard) -------------------------------
    def overhead_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self.cfg.step_overhead + self.cfg.per_seq_overhead * num_seqs

    def _experts_touched(self, num_tokens: ArrayLike) -> ArrayLike:
        """Expected distinct experts hit by ``num_tokens`` tokens routed top-k
        uniformly: E·(1 − (1 − k/E)^n). Equal to 1 for a dense model."""
        e, k = self.model.num_experts, self.model.experts_per_token
        if e == 1:
            return np.ones_like(np.asarray(num_tokens, dtype=np.float64))
        return e * (1.0 - (1.0 - k / e) ** np.asarray(num_tokens, dtype=np.float64))

    def _dense_bytes(self, num_tokens: ArrayLike) -> ArrayLike:
        weights = self._attn_weight_bytes + self._experts_touched(num_tokens) * self._expert_weight_bytes
        activations = 4.0 * num_tokens * self.model.hidden_size * ACTIVATION_BYTES
        return weights + activations

    def dense_s(self, num_tokens: ArrayLike) -> ArrayLike:
        compute = self._active_flops_per_token * num_tokens / self._gemm_flops_per_s
        memory = self._dense_bytes(num_tokens) / self._bw_bytes_per_s
        return np.where(np.asarray(num_tokens) > 0, np.maximum(compute, memory), 0.0)

    def attn_prefill_s(self, prefill_attn_work: ArrayLike) -> ArrayLike:
        return self._attn_flops_per_work * prefill_attn_work / self._attn_flops_per_s

    def attn_decode_s(self, decode_kv_tokens: ArrayLike) -> ArrayLike:
        return self._kv_bytes_per_token_layer * decode_kv_tokens / self._bw_bytes_per_s

    def tp_comm_s(self, num_tokens: ArrayLike) -> ArrayLike:
        if self.tp == 1:
            return np.zeros_like(np.asarray(num_tokens, dtype=np.float64))
        msg_bytes = num_tokens * self.model.hidden_size * ACTIVATION_BYTES
        ring = 2.0 * (self.tp - 1) / self.tp * msg_bytes / self._link_bytes_per_s
        return 2.0 * (self._allreduce_latency_s + ring)

    def lm_head_s(self, num_seqs: ArrayLike) -> ArrayLike:
        compute = self._head_flops_per_seq * num_seqs / self._head_flops_per_s
        return np.maximum(compute, self._head_bytes / self._bw_bytes_per_s)

    # -- one step in plain floats (the hot path of the simulator) ------------------
    def step_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float, kv_read_tokens: float | None = None
                    ) -> tuple[float, float, float]:
        """The same sums as ``step_time_s`` and ``work`` without numpy overhead."""
        e = self._num_experts
        if e == 1:
            weight_bytes = self._dense_weight_bytes
        else:
            k = self.model.experts_per_token
            weight_bytes = (self._attn_weight_bytes
                            + e * (1.0 - (1.0 - k / e) ** num_tokens) * self._expert_weight_bytes)
        dense_bytes = weight_bytes + self._act_bytes_per_token * num_tokens
        dense_flops = self._active_flops_per_token * num_tokens
        bw = self._bw_bytes_per_s
        if num_tokens > 0:
            # max(compute, memory), without the call
            dense, memory = dense_flops / self._gemm_flops_per_s, dense_bytes / bw
            if memory > dense:
                dense = memory
        else:
            dense = 0.0
        attn_flops = self._attn_flops_per_work * prefill_attn_work
        kv_bytes = self._kv_bytes_per_token_layer * decode_kv_tokens
        per_layer = (dense + attn_flops / self._attn_flops_per_s + kv_bytes / bw
                     + self._tp_latency_s + self._tp_s_per_token * num_tokens)
        head_flops = self._head_flops_per_seq * num_seqs
        head = head_flops / self._head_flops_per_s
        if self._head_memory_s > head:
            head = self._head_memory_s
        step_overhead, per_seq_overhead = self._overheads_s
        layers = self.num_layers
        time_s = step_overhead + per_seq_overhead * num_seqs + layers * per_layer + head
        tp = self.tp
        # a decode token meets each key as a prefill query does: the same FLOPs per pair
        flops = (layers * (dense_flops + attn_flops + self._attn_flops_per_work * decode_kv_tokens)
                 + head_flops) * tp
        moved = (layers * (dense_bytes + kv_bytes) + self._head_bytes) * tp
        return time_s, flops, moved

    def decode_run(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> DecodeRun:
        """As ``CostModel.decode_run``, from the batch's cost at no KV (kept per batch size)
        and the exact cost per KV token read, without evaluating any step."""
        base = self._decode_at_no_kv.get(num_seqs)
        if base is None:
            n = float(num_seqs)
            base = self._decode_at_no_kv[num_seqs] = self.step_scalar(n, n, 0.0, 0.0)
        t_kv, f_kv, b_kv = self._decode_per_kv
        ends = LinearStepEnds(base[0] + t_kv * kv_tokens_first, t_kv * num_seqs, num_steps)
        # (step ends, duration, tokens per step, FLOPs first and slope, bytes first and slope)
        return DecodeRun(ends, ends.last_s, float(num_seqs),
                         base[1] + f_kv * kv_tokens_first, f_kv * num_seqs,
                         base[2] + b_kv * kv_tokens_first, b_kv * num_seqs)

    # -- work for MFU / MBU -------------------------------------------------
    def work(self, shape: BatchShape) -> tuple[ArrayLike, ArrayLike]:
        layers = self.num_layers
        flops_shard = (layers * (self._active_flops_per_token * shape.num_tokens
                                 + self._attn_flops_per_work * shape.prefill_attn_work
                                 + 4.0 * self.model.num_heads * self.model.head_dim / self.tp
                                 * shape.decode_kv_tokens)
                       + self._head_flops_per_seq * shape.num_seqs)
        bytes_shard = (layers * (self._dense_bytes(shape.num_tokens)
                                 + self._kv_bytes_per_token_layer * shape.decode_kv_tokens)
                       + self._head_bytes)
        return flops_shard * self.tp, bytes_shard * self.tp

    @property
    def peak_flops_per_gpu(self) -> float:
        return self._peak_flops

    @property
    def peak_bytes_per_s_per_gpu(self) -> float:
        return self._peak_bw
