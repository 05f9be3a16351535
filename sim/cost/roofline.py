"""Roofline cost model from datasheet figures and efficiency factors.

Each GEMM-like term takes max(FLOPs / usable FLOP/s, bytes / usable
bandwidth): at small token counts a step is bound by reading the weights
once (shared by the whole batch, which is why batching pays), at large ones
by arithmetic. Attention over the KV cache in decode is bound by reading the
cache; prefill attention by arithmetic. Tensor parallelism divides FLOPs,
weights and KV heads by ``tp`` and adds two ring all-reduces per layer.

The efficiencies have the shape of GPU kernels measured on real GPUs
(``calibrate.kernels.roofline_fit`` fits them, per operation, to NVIDIA
AIConfigurator's database; ``profiles/calibrated/gpu/roofline-fit.md`` says how
far the result sits from the kernels, per GPU):

- a GEMM of M tokens reaches ``flops_efficiency · M / (M + gemm_half_tokens)``
  of peak FLOP/s: it costs as if every weight it reads met ``gemm_half_tokens``
  more tokens. fp8/int8/fp4 GEMMs (at their own tensor-core rate) reach a smaller
  share of that rate (``quantized_flops_efficiency``);
- weights are read at ``weight_bandwidth_efficiency`` of HBM bandwidth (bf16;
  ``quantized_weight_bandwidth_efficiency`` for one byte or less per weight), the
  KV cache in decode at ``bandwidth_efficiency``;
- each kernel has a fixed time whatever its size: ``gemm_fixed_time`` per GEMM
  (four a layer, one LM head) and one per attention kernel that runs in a step;
- an all-reduce over ``tp`` GPUs takes the hardware's ``allreduce_latency`` (two
  GPUs) plus ``allreduce_latency_per_gpu`` per further GPU, and moves its ring
  traffic at ``interconnect_efficiency`` of the link's one-way bandwidth: half the
  hardware profile's ``interconnect_bandwidth``, which adds both directions.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from sim.config.common import PositiveFraction, Seconds
from sim.config.specs import BYTES_PER_ELEMENT, HardwareSpec, ModelSpec
from sim.cost import libm
from sim.cost.base import CostModel, CostModelConfigBase, DecodeRun, step_sum
from sim.cost.shape import ArrayLike, BatchShape
from sim.cost.steps import LinearStepEnds

ACTIVATION_BYTES = 2.0  # bf16 activations
GEMMS_PER_LAYER = 4     # QKV, attention output, gate+up, down

# Fitted to the measured kernels by ``python -m calibrate roofline-fit`` (the median over
# GPUs of each operation's fit; profiles/calibrated/gpu/roofline-fit.yaml, ``generic``).
FITTED = {
    "flops_efficiency": 0.85,
    "quantized_flops_efficiency": 0.53,
    "gemm_half_tokens": 130.0,
    "weight_bandwidth_efficiency": 0.9,
    "quantized_weight_bandwidth_efficiency": 0.77,
    "gemm_fixed_time": 4.9e-06,
    "bandwidth_efficiency": 0.79,
    "attention_efficiency": 0.5,
    "attention_prefill_fixed_time": 1.4e-05,
    "attention_decode_fixed_time": 1.4e-05,
    "interconnect_efficiency": 0.59,
    "allreduce_latency_per_gpu": 1.8e-07,
}


class RooflineConfig(CostModelConfigBase):
    type: Literal["roofline"] = "roofline"
    flops_efficiency: PositiveFraction = Field(
        FITTED["flops_efficiency"],
        description="Largest share of peak bf16/fp16 FLOP/s that GEMMs reach (at many "
                    "tokens); a step of M tokens reaches this x M / (M + gemm_half_tokens). "
                    "Until gemm_half_tokens existed it was the share at every size")
    quantized_flops_efficiency: PositiveFraction = Field(
        FITTED["quantized_flops_efficiency"],
        description="The same for GEMMs run at a low-precision tensor-core rate (fp8, int8, "
                    "fp4 weights), a share of that rate")
    gemm_half_tokens: float = Field(
        FITTED["gemm_half_tokens"], ge=0.0,
        description="Tokens in a step at which GEMMs reach half their largest share of peak "
                    "FLOP/s (0: the same share at every size)")
    weight_bandwidth_efficiency: PositiveFraction = Field(
        FITTED["weight_bandwidth_efficiency"],
        description="Share of peak memory bandwidth reached by GEMMs reading bf16/fp16 "
                    "weights (and the LM head)")
    quantized_weight_bandwidth_efficiency: PositiveFraction = Field(
        FITTED["quantized_weight_bandwidth_efficiency"],
        description="The same for weights of one byte or less (fp8, int8, int4, fp4)")
    gemm_fixed_time: Seconds = Field(
        FITTED["gemm_fixed_time"],
        description="Fixed time of one GEMM kernel whatever its size (four a layer, one for "
                    "the LM head)")
    bandwidth_efficiency: PositiveFraction = Field(
        FITTED["bandwidth_efficiency"],
        description="Share of peak memory bandwidth reached by decode attention reading the "
                    "KV cache (weight reads: weight_bandwidth_efficiency; until that field "
                    "existed this covered both)")
    attention_efficiency: PositiveFraction = Field(
        FITTED["attention_efficiency"],
        description="Share of peak bf16 FLOP/s reached by prefill attention kernels")
    attention_prefill_fixed_time: Seconds = Field(
        FITTED["attention_prefill_fixed_time"],
        description="Fixed time of one layer's prefill attention kernel in a step with "
                    "prompt tokens")
    attention_decode_fixed_time: Seconds = Field(
        FITTED["attention_decode_fixed_time"],
        description="Fixed time of one layer's decode attention kernel in a step with "
                    "decode tokens")
    interconnect_efficiency: PositiveFraction = Field(
        FITTED["interconnect_efficiency"],
        description="Share of the link's one-way bandwidth (half the hardware profile's "
                    "interconnect_bandwidth, which adds both directions) reached by a ring "
                    "all-reduce. Until this was said it was a share of the whole figure")
    allreduce_latency_per_gpu: Seconds = Field(
        FITTED["allreduce_latency_per_gpu"],
        description="Latency an all-reduce adds per GPU past two, on top of the hardware "
                    "profile's allreduce_latency")
    step_overhead: Seconds = Field(
        1e-3, description="Fixed CPU/launch overhead per iteration (scheduler, sampling): "
                          "the host time per step; unless written here, the pool's engine "
                          "preset's replaces it (sim/config/engines.py)")
    per_seq_overhead: Seconds = Field(
        5e-6, description="Extra per-sequence overhead per iteration (input prep, sampling): "
                          "host time; unless written here, the engine preset's replaces it")

    def gemm_flops_efficiency(self, hardware: HardwareSpec, weight_dtype: str) -> float:
        """The largest share of ``hardware.compute_flops_per_s(weight_dtype)`` a GEMM with
        these weights reaches: the quantised share where it runs at a low-precision rate."""
        low = hardware.compute_flops_per_s(weight_dtype) != hardware.flops["bf16"]
        return self.quantized_flops_efficiency if low else self.flops_efficiency

    def weight_read_efficiency(self, weight_dtype: str) -> float:
        quantized = BYTES_PER_ELEMENT[weight_dtype] <= 1.0
        return (self.quantized_weight_bandwidth_efficiency if quantized
                else self.weight_bandwidth_efficiency)


def allreduce_s(hardware: HardwareSpec, cfg: RooflineConfig, tp: int,
                message_bytes: ArrayLike) -> ArrayLike:
    """Seconds of one ring all-reduce of ``message_bytes`` over ``tp`` GPUs (0 at tp 1)."""
    message_bytes = np.asarray(message_bytes, dtype=np.float64)
    if tp == 1:
        return np.zeros_like(message_bytes)
    link = hardware.interconnect_bandwidth / 2.0 * cfg.interconnect_efficiency
    latency = hardware.allreduce_latency + cfg.allreduce_latency_per_gpu * (tp - 2)
    return latency + 2.0 * (tp - 1) / tp * message_bytes / link


class RooflineCostModel(CostModel):
    decode_time_linear = True   # decode attention is the only term that varies with KV read

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, tp: int,
                 weight_dtype: str, kv_dtype: str, cfg: RooflineConfig) -> None:
        self.cfg = cfg
        self.model = model
        self.hardware = hardware
        self.tp = tp
        self.num_layers = model.num_layers
        w_bytes = BYTES_PER_ELEMENT[weight_dtype]
        kv_bytes = BYTES_PER_ELEMENT[kv_dtype]
        self._gemm_flops_per_s = (hardware.compute_flops_per_s(weight_dtype)
                                  * cfg.gemm_flops_efficiency(hardware, weight_dtype))
        self._attn_flops_per_s = hardware.flops["bf16"] * cfg.attention_efficiency
        self._weight_bw = hardware.hbm_bandwidth * cfg.weight_read_efficiency(weight_dtype)
        self._bw_bytes_per_s = hardware.hbm_bandwidth * cfg.bandwidth_efficiency  # KV reads
        self._gemm_fixed_s = GEMMS_PER_LAYER * cfg.gemm_fixed_time
        self._prefill_fixed_s = cfg.attention_prefill_fixed_time
        self._decode_fixed_s = cfg.attention_decode_fixed_time
        # per layer, per shard
        self._attn_weight_bytes = model.attn_params_per_layer * w_bytes / tp
        self._expert_weight_bytes = model.expert_params * w_bytes / tp
        # FLOPs per weight byte read: a GEMM costs as if each weight met gemm_half_tokens more
        self._half_flops_per_weight_byte = 2.0 * cfg.gemm_half_tokens / w_bytes
        self._active_flops_per_token = 2.0 * model.active_params_per_layer / tp
        self._attn_flops_per_work = 4.0 * model.num_heads * model.head_dim / tp
        self._kv_bytes_per_token_layer = 2.0 * model.num_kv_heads * model.head_dim * kv_bytes / tp
        self._head_flops_per_seq = 2.0 * model.hidden_size * model.vocab_size / tp
        # the LM head stays in bf16 in quantised checkpoints, and runs at that rate
        head_dtype = model.edge_dtype(weight_dtype)
        self._head_bytes = (model.hidden_size * model.vocab_size
                            * BYTES_PER_ELEMENT[head_dtype] / tp)
        self._head_flops_per_s = (hardware.compute_flops_per_s(head_dtype)
                                  * cfg.gemm_flops_efficiency(hardware, head_dtype))
        self._head_bw = hardware.hbm_bandwidth * cfg.weight_read_efficiency(head_dtype)
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
        self._link_bytes_per_s = hardware.interconnect_bandwidth / 2.0 * cfg.interconnect_efficiency
        self._allreduce_latency_s = (hardware.allreduce_latency
                                     + cfg.allreduce_latency_per_gpu * (tp - 2))
        self._tp_latency_s = 2.0 * self._allreduce_latency_s if tp > 1 else 0.0
        self._tp_s_per_token = (2.0 * 2.0 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES
                                / self._link_bytes_per_s)
        self._head_memory_s = self._head_bytes / self._head_bw + cfg.gemm_fixed_time
        self._head_half_s = (self._head_flops_per_seq * cfg.gemm_half_tokens
                             / self._head_flops_per_s + cfg.gemm_fixed_time)
        self._head_s_per_seq = self._head_flops_per_seq / self._head_flops_per_s
        self._num_experts = model.num_experts
        self._dense_weight_bytes = self._attn_weight_bytes + self._expert_weight_bytes
        # a dense model's GEMM arithmetic: seconds at no tokens (the half-share tokens) and
        # per token
        self._dense_half_s = (self._half_flops_per_weight_byte * self._dense_weight_bytes
                              / self._gemm_flops_per_s)
        self._dense_s_per_token = self._active_flops_per_token / self._gemm_flops_per_s
        self._scalar = (self._active_flops_per_token, self._act_bytes_per_token, self._weight_bw,
                        self._gemm_fixed_s, self._attn_flops_per_work, self._attn_flops_per_s,
                        self._prefill_fixed_s, self._kv_bytes_per_token_layer,
                        self._bw_bytes_per_s, self._decode_fixed_s, self._tp_latency_s,
                        self._tp_s_per_token, self._head_half_s, self._head_s_per_seq,
                        self._head_memory_s, cfg.step_overhead, cfg.per_seq_overhead,
                        self._head_flops_per_seq, self._head_bytes, float(self.num_layers),
                        float(tp))

    @property
    def label(self) -> str:
        return "roofline"

    # -- terms (seconds, one layer, one shard) -------------------------------
    def overhead_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self.cfg.step_overhead + self.cfg.per_seq_overhead * num_seqs

    def host_terms(self) -> tuple[float, float, bool]:
        """The whole overhead is host time; written in the scenario, it stays."""
        cfg = self.cfg
        written = bool({"step_overhead", "per_seq_overhead"} & cfg.model_fields_set)
        return cfg.step_overhead, cfg.per_seq_overhead, written

    def _experts_touched(self, num_tokens: ArrayLike) -> ArrayLike:
        """Expected distinct experts hit by ``num_tokens`` tokens routed top-k
        uniformly: E·(1 − (1 − k/E)^n). Equal to 1 for a dense model."""
        e, k = self.model.num_experts, self.model.experts_per_token
        if e == 1:
            return np.ones_like(np.asarray(num_tokens, dtype=np.float64))
        return e * (1.0 - libm.power(1.0 - k / e, num_tokens))

    def _dense_bytes(self, num_tokens: ArrayLike) -> ArrayLike:
        return self._weight_bytes(num_tokens) + self._act_bytes_per_token * num_tokens

    def _weight_bytes(self, num_tokens: ArrayLike) -> ArrayLike:
        if self._num_experts == 1:
            return np.full_like(np.asarray(num_tokens, dtype=np.float64), self._dense_weight_bytes)
        return self._attn_weight_bytes + self._experts_touched(num_tokens) * self._expert_weight_bytes

    # Each term below has a plain-float twin in ``step_scalar``, written with the same
    # coefficients in the same order; tests/cost/test_step_sum.py holds them to the bit.
    def dense_s(self, num_tokens: ArrayLike) -> ArrayLike:
        num_tokens = np.asarray(num_tokens, dtype=np.float64)
        weights = self._weight_bytes(num_tokens)
        if self._num_experts == 1:
            compute = self._dense_half_s + self._dense_s_per_token * num_tokens
        else:
            compute = ((self._active_flops_per_token * num_tokens
                        + self._half_flops_per_weight_byte * weights) / self._gemm_flops_per_s)
        memory = (weights + self._act_bytes_per_token * num_tokens) / self._weight_bw
        return np.where(num_tokens > 0, self._gemm_fixed_s + np.maximum(compute, memory), 0.0)

    def attn_prefill_s(self, prefill_attn_work: ArrayLike) -> ArrayLike:
        compute = self._attn_flops_per_work * prefill_attn_work / self._attn_flops_per_s
        return np.where(np.asarray(prefill_attn_work) > 0, self._prefill_fixed_s + compute, 0.0)

    def attn_decode_s(self, decode_kv_tokens: ArrayLike) -> ArrayLike:
        memory = self._kv_bytes_per_token_layer * decode_kv_tokens / self._bw_bytes_per_s
        return np.where(np.asarray(decode_kv_tokens) > 0, self._decode_fixed_s + memory, 0.0)

    def tp_comm_s(self, num_tokens: ArrayLike) -> ArrayLike:
        """Two ring all-reduces of the layer's activations (``allreduce_s`` each)."""
        return self._tp_latency_s + self._tp_s_per_token * np.asarray(num_tokens, dtype=np.float64)

    def lm_head_s(self, num_seqs: ArrayLike) -> ArrayLike:
        compute = self._head_half_s + self._head_s_per_seq * np.asarray(num_seqs, dtype=np.float64)
        return np.maximum(compute, self._head_memory_s)

    # -- one step in plain floats (the hot path of the simulator) ------------------
    def step_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float, kv_read_tokens: float | None = None,
                    sequences: float | None = None) -> tuple[float, float, float]:
        """``step_time_s`` and ``work`` of one step, term by term in plain floats."""
        (flops_per_token, act_bytes_per_token, weight_bw, gemm_fixed, attn_per_work,
         attn_flops_per_s, prefill_fixed, kv_per_token, kv_bw, decode_fixed, tp_latency,
         tp_per_token, head_half, head_per_seq, head_memory, step_overhead, per_seq_overhead,
         head_flops_per_seq, head_bytes, layers, tp) = self._scalar
        dense_flops = flops_per_token * num_tokens
        if self._num_experts == 1:
            weight_bytes = self._dense_weight_bytes
            compute = self._dense_half_s + self._dense_s_per_token * num_tokens
        else:
            e, k = self._num_experts, self.model.experts_per_token
            weight_bytes = (self._attn_weight_bytes
                            + e * (1.0 - (1.0 - k / e) ** num_tokens) * self._expert_weight_bytes)
            compute = ((dense_flops + self._half_flops_per_weight_byte * weight_bytes)
                       / self._gemm_flops_per_s)
        dense_bytes = weight_bytes + act_bytes_per_token * num_tokens
        dense = 0.0
        if num_tokens > 0:
            memory = dense_bytes / weight_bw
            dense = gemm_fixed + (compute if compute > memory else memory)
        attn_flops = attn_per_work * prefill_attn_work
        prefill = prefill_fixed + attn_flops / attn_flops_per_s if prefill_attn_work > 0 else 0.0
        kv_bytes = kv_per_token * decode_kv_tokens
        decode = decode_fixed + kv_bytes / kv_bw if decode_kv_tokens > 0 else 0.0
        head = head_half + head_per_seq * num_seqs
        if head_memory > head:
            head = head_memory
        time_s = step_sum(step_overhead + per_seq_overhead * num_seqs, layers, dense,
                          tp_latency + tp_per_token * num_tokens, prefill, decode, head)
        # a decode token meets each key as a prefill query does: the same FLOPs per pair
        flops = (layers * (dense_flops + attn_flops + attn_per_work * decode_kv_tokens)
                 + head_flops_per_seq * num_seqs) * tp
        moved = (layers * (dense_bytes + kv_bytes) + head_bytes) * tp
        return time_s, flops, moved

    def work_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float) -> tuple[float, float]:
        """``step_scalar``'s FLOPs and bytes without its seconds (what a measured cost model
        counts its work by): its twin, the same expressions in the same order, so the same
        bits (tests/cost/test_step_sum.py)."""
        (flops_per_token, act_bytes_per_token, _, _, attn_per_work, _, _, kv_per_token, _, _,
         _, _, _, _, _, _, _, head_flops_per_seq, head_bytes, layers, tp) = self._scalar
        if self._num_experts == 1:
            weight_bytes = self._dense_weight_bytes
        else:
            e, k = self._num_experts, self.model.experts_per_token
            weight_bytes = (self._attn_weight_bytes
                            + e * (1.0 - (1.0 - k / e) ** num_tokens) * self._expert_weight_bytes)
        flops = (layers * (flops_per_token * num_tokens + attn_per_work * prefill_attn_work
                           + attn_per_work * decode_kv_tokens)
                 + head_flops_per_seq * num_seqs) * tp
        moved = (layers * ((weight_bytes + act_bytes_per_token * num_tokens)
                           + kv_per_token * decode_kv_tokens) + head_bytes) * tp
        return flops, moved

    def decode_run(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> DecodeRun:
        """As ``CostModel.decode_run``, from the batch's cost at no KV (kept per batch size,
        with the decode attention kernels' fixed time: every decode step reads keys) and the
        exact cost per KV token read, without evaluating any step."""
        base = self._decode_base(num_seqs)
        t_kv, f_kv, b_kv = self._decode_per_kv
        ends = LinearStepEnds(base[0] + t_kv * kv_tokens_first, t_kv * num_seqs, num_steps)
        # (step ends, duration, tokens per step, FLOPs first and slope, bytes first and slope)
        return DecodeRun(ends, ends.last_s, float(num_seqs),
                         base[1] + f_kv * kv_tokens_first, f_kv * num_seqs,
                         base[2] + b_kv * kv_tokens_first, b_kv * num_seqs)

    def _decode_base(self, num_seqs: int) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of a decode step of ``num_seqs`` at no KV, with the
        decode attention kernels' fixed time, kept per batch size."""
        base = self._decode_at_no_kv.get(num_seqs)
        if base is None:
            n = float(num_seqs)
            t, f, b = self.step_scalar(n, n, 0.0, 0.0)
            base = self._decode_at_no_kv[num_seqs] = (
                t + self.num_layers * self._decode_fixed_s, f, b)
        return base

    def decode_work(self, num_seqs: int, kv_tokens_first: float
                    ) -> tuple[float, float, float, float]:
        base = self._decode_base(num_seqs)
        _, f_kv, b_kv = self._decode_per_kv
        return (base[1] + f_kv * kv_tokens_first, f_kv * num_seqs,
                base[2] + b_kv * kv_tokens_first, b_kv * num_seqs)

    # -- work for MFU / MBU -------------------------------------------------
    def work(self, shape: BatchShape) -> tuple[ArrayLike, ArrayLike]:
        layers = self.num_layers
        flops_shard = (layers * (self._active_flops_per_token * shape.num_tokens
                                 + self._attn_flops_per_work * shape.prefill_attn_work
                                 + self._attn_flops_per_work * shape.decode_kv_tokens)
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
