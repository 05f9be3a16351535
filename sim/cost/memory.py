"""How many KV blocks a replica has: memory left after weights and reserve."""
from __future__ import annotations

from dataclasses import dataclass

from sim.config.specs import HardwareSpec, ModelSpec


@dataclass(frozen=True)
class KvBudget:
    num_blocks: int
    block_size_tokens: int
    kv_bytes_per_token: float      # whole model, all shards
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float        # memory given to KV on each GPU

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size_tokens


def kv_budget(model: ModelSpec, hardware: HardwareSpec, *, tp: int, weight_dtype: str,
              kv_dtype: str, block_size_tokens: int, gpu_memory_utilization: float,
              activation_reserve_bytes: float, kv_cache_bytes: float | None,
              draft: ModelSpec | None = None) -> KvBudget:
    """Blocks per replica = (reported memory·utilisation − weights/tp − reserve)
    / (block · kv/tp), as vLLM's memory planner counts them (the reported memory is what
    the driver gives an engine, a little under the card's capacity).

    ``kv_cache_bytes`` (per GPU), when given, replaces the computed KV memory,
    like vLLM's ``kv_cache_memory_bytes``; it must still fit beside the weights.
    A speculative decoding ``draft`` model sits beside the target, sharded the same way:
    its weights take memory and each block also holds the draft's KV for its tokens (as
    vLLM allocates one cache for both).

    Returns a budget with ``num_blocks <= 0`` when the model does not fit;
    the caller turns that into a validation error.
    """
    weight_per_gpu = model.weight_bytes(weight_dtype) / tp
    if draft is not None:
        weight_per_gpu += draft.weight_bytes(weight_dtype) / tp
    free_per_gpu = (hardware.planning_memory * gpu_memory_utilization - weight_per_gpu
                    - activation_reserve_bytes)
    if kv_cache_bytes is not None:
        free_per_gpu = kv_cache_bytes if kv_cache_bytes <= free_per_gpu else -kv_cache_bytes
    kv_per_token = model.kv_bytes_per_token(kv_dtype)
    if draft is not None:
        kv_per_token += draft.kv_bytes_per_token(kv_dtype)
    block_bytes_per_gpu = block_size_tokens * kv_per_token / tp
    num_blocks = int(free_per_gpu // block_bytes_per_gpu) if free_per_gpu > 0 else 0
    return KvBudget(num_blocks=num_blocks, block_size_tokens=block_size_tokens,
                    kv_bytes_per_token=kv_per_token, weight_bytes_per_gpu=weight_per_gpu,
                    kv_bytes_per_gpu=max(free_per_gpu, 0.0))
