"""Hardware and model profiles: the datasheet and architecture facts.

Profiles live as YAML under ``profiles/hardware`` and ``profiles/models``;
a scenario may also define its own under ``hardware:`` and ``models:``.
Derived quantities (parameter counts, bytes per token of KV) are computed
here once so every component agrees on them.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sim.config.common import (BytesPerS, Flag, FlopsPerS, PositiveBytes, PositiveFraction,
                               Name, PositiveInt, Seconds, StrictModel, UsdPerGpuHour)

DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5,
}


# far above any accelerator's memory (1 PiB), so a slip of units is refused
MAX_DEVICE_BYTES = 2.0 ** 50


class GpuPrices(StrictModel):
    on_demand: UsdPerGpuHour = Field(description="USD per GPU-hour, on demand")
    reserved: UsdPerGpuHour | None = Field(None, description="USD per GPU-hour, reserved")
    spot: UsdPerGpuHour | None = Field(None, description="USD per GPU-hour, spot")


class HardwareSpec(StrictModel):
    """One accelerator kind. Figures are per GPU, dense (no sparsity)."""

    name: Name = Field(description="Display name, e.g. H100-SXM")
    memory: PositiveBytes = Field(
        le=MAX_DEVICE_BYTES, description="Device memory as its maker states it, in the maker's units: HBM "
                    "capacities are binary, an '80 GB' H100 has 80GiB")
    reported_memory: PositiveBytes | None = Field(
        None, le=MAX_DEVICE_BYTES, description="Total memory the driver reports to an engine (CUDA's total, "
                          "e.g. 79.1GiB on an 80 GiB H100), of which the engine's memory "
                          "planner takes gpu_memory_utilization; default: memory")
    hbm_bandwidth: BytesPerS = Field(description="Memory bandwidth, e.g. 3.35TB/s")
    flops: dict[DType, FlopsPerS] = Field(
        description="Peak dense FLOP/s per compute dtype, e.g. {bf16: 989TFLOP/s}")
    interconnect_bandwidth: BytesPerS = Field(
        description="GPU-to-GPU bandwidth per GPU (NVLink, PCIe) as datasheets give it, both "
                    "directions added, e.g. 900GB/s for NVLink4 (450GB/s each way); the "
                    "roofline's all-reduce moves data at half of it")
    allreduce_latency: Seconds = Field(
        8e-6, description="Fixed latency of one all-reduce of a small message over two GPUs "
                          "(the roofline adds allreduce_latency_per_gpu per further GPU)")
    max_gpus_per_node: PositiveInt = Field(
        8, description="GPUs in one node: the largest tensor-parallel group; a replica's "
                       "pipeline stages (tp x pp GPUs) beyond it sit on further nodes")
    internode_bandwidth: BytesPerS | None = Field(
        None, description="Network bandwidth per GPU between nodes, one direction (50GB/s "
                          "for one 400 Gb/s InfiniBand NDR adapter per GPU): pipeline stages "
                          "on different nodes send their activations over it; unset: a "
                          "replica's tp x pp GPUs must fit in one node")
    internode_latency: Seconds = Field(
        10e-6, description="Fixed latency of one send between nodes (NCCL point-to-point "
                           "over InfiniBand for a small message: about 10 us)")
    internode_efficiency: PositiveFraction = Field(
        1.0, description="Share of internode_bandwidth a send between nodes moves data at "
                         "(1: the full adapter rate, as NVIDIA AIConfigurator's analytic "
                         "point-to-point model takes it; the roofline's "
                         "interconnect_efficiency, fitted to NVLink all-reduce kernels, is "
                         "not applied to the network)")
    price_per_gpu_hour: GpuPrices = Field(description="USD per GPU-hour by purchase option")
    price_source: str | None = Field(
        None, max_length=300, description="Where and when the prices were read (shown in "
                                          "report.html beside every cost)")

    @field_validator("flops")
    @classmethod
    def _needs_bf16(cls, flops: dict[str, float]) -> dict[str, float]:
        if "bf16" not in flops:          # at the field: its line in a profile or scenario
            raise ValueError("must give at least a 'bf16' figure")
        return flops

    @model_validator(mode="after")
    def _reported_within_memory(self) -> "HardwareSpec":
        if self.reported_memory is not None and self.reported_memory > self.memory:
            raise ValueError(f"reported_memory ({self.reported_memory / 2 ** 30:.2f} GiB) "
                             f"exceeds memory ({self.memory / 2 ** 30:.2f} GiB)")
        return self

    @property
    def planning_memory(self) -> float:
        """Bytes per GPU an engine's memory planner starts from: what the driver reports."""
        return self.memory if self.reported_memory is None else self.reported_memory

    def compute_flops_per_s(self, weight_dtype: str) -> float:
        """Peak FLOP/s for GEMMs with weights of ``weight_dtype``.

        fp8/int8/fp4 weights use the matching tensor-core rate where the
        datasheet has one (W8A8-style kernels); int4 is weight-only
        quantisation, so the math still runs at the bf16 rate.
        """
        if weight_dtype in ("fp8", "int8", "fp4") and weight_dtype in self.flops:
            return self.flops[weight_dtype]
        return self.flops["bf16"]


class ModelSpec(StrictModel):
    """A decoder-only transformer, dense or mixture-of-experts."""

    name: Name = Field(description="Model name used by streams and pools")
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    ffn_size: PositiveInt = Field(description="Intermediate size of one (expert) MLP")
    vocab_size: PositiveInt
    num_experts: PositiveInt = Field(1, description="MLP experts per layer (1 = dense)")
    experts_per_token: PositiveInt = Field(1, description="Routed experts per token (top-k)")
    tied_embeddings: Flag = Field(False, description="LM head shares the embedding matrix")
    max_model_len: PositiveInt = Field(131072, description="Longest context in tokens")
    weights: PositiveBytes | None = Field(
        None, description="bf16 weight size, e.g. 141GB, instead of the one computed from the shape")

    @model_validator(mode="after")
    def _check_shape(self) -> "ModelSpec":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        return self

    # -- parameter counts --------------------------------------------------
    @property
    def attn_params_per_layer(self) -> int:
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size

    @property
    def expert_params(self) -> int:
        """One gated MLP (up, gate, down)."""
        return 3 * self.hidden_size * self.ffn_size

    @property
    def mlp_params_per_layer(self) -> int:
        router = self.hidden_size * self.num_experts if self.num_experts > 1 else 0
        return self.num_experts * self.expert_params + router

    @property
    def active_params_per_layer(self) -> int:
        return self.attn_params_per_layer + self.experts_per_token * self.expert_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.embedding_params
        layers = self.num_layers * (self.attn_params_per_layer + self.mlp_params_per_layer)
        return layers + self.embedding_params + head

    @property
    def edge_params(self) -> int:
        """The embedding and the LM head (one matrix when tied)."""
        return self.embedding_params * (1 if self.tied_embeddings else 2)

    @staticmethod
    def edge_dtype(weight_dtype: str) -> str:
        """The embedding's and LM head's dtype: quantised checkpoints (FP8, INT8, AWQ/GPTQ
        INT4, FP4) quantise the layers' linear weights and keep these two in bf16."""
        return "bf16" if BYTES_PER_ELEMENT[weight_dtype] < BYTES_PER_ELEMENT["bf16"] \
            else weight_dtype

    def weight_bytes(self, weight_dtype: str) -> float:
        """All weights in ``weight_dtype``, the embedding and LM head in ``edge_dtype``
        (Llama-3.1-8B in fp8: 8.46 GiB, as vLLM loads the published FP8 checkpoint)."""
        layers, edges = self.weight_bytes_split(weight_dtype)
        return layers + edges

    def weight_bytes_split(self, weight_dtype: str) -> tuple[float, float]:
        """(bytes of the transformer layers, bytes of the embedding and LM head) in
        ``weight_dtype``: what pipeline stages divide (layers) and what the first and last
        stage hold beside them (edges)."""
        bf16 = BYTES_PER_ELEMENT["bf16"]
        total_bf16 = self.weights if self.weights is not None else self.total_params * bf16
        edge_bf16 = min(self.edge_params * bf16, total_bf16)
        return ((total_bf16 - edge_bf16) * BYTES_PER_ELEMENT[weight_dtype] / bf16,
                edge_bf16 * BYTES_PER_ELEMENT[self.edge_dtype(weight_dtype)] / bf16)

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """2 (K and V) x layers x kv heads x head dim x bytes per element."""
        return (2 * self.num_layers * self.num_kv_heads * self.head_dim
                * BYTES_PER_ELEMENT[kv_dtype])
