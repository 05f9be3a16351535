"""How many KV blocks a replica has: memory left after weights and reserve."""
from __future__ import annotations

from dataclasses import dataclass

from sim.config.specs import HardwareSpec, ModelSpec
from sim.cost.pipeline import stage_layers


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
              draft: ModelSpec | None = None, pp: int = 1) -> KvBudget:
    """Blocks per replica = (reported memory·utilisation − weights/tp − reserve)
    / (block · kv/tp), as vLLM's memory planner counts them (the reported memory is what
    the driver gives an engine, a little under the card's capacity).

    With ``pp`` pipeline stages (``pp_kv_budget``) each stage's GPUs hold that stage's
    layers (and the embedding or LM head on the first and last) and their KV, and the
    replica has the blocks of its tightest stage, as vLLM gives every stage one count.

    ``kv_cache_bytes`` (per GPU), when given, replaces the computed KV memory,
    like vLLM's ``kv_cache_memory_bytes``; it must still fit beside the weights.
    A speculative decoding ``draft`` model sits beside the target, sharded the same way:
    its weights take memory and each block also holds the draft's KV for its tokens (as
    vLLM allocates one cache for both).

    Returns a budget with ``num_blocks <= 0`` when the model does not fit;
    the caller turns that into a validation error.
    """
    if pp > 1:
        return pp_kv_budget(model, hardware, tp=tp, pp=pp, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, block_size_tokens=block_size_tokens,
                            gpu_memory_utilization=gpu_memory_utilization,
                            activation_reserve_bytes=activation_reserve_bytes,
                            kv_cache_bytes=kv_cache_bytes, draft=draft)
    weight_per_gpu = weights_per_gpu(model, weight_dtype, tp, 1)
    if draft is not None:
        weight_per_gpu += draft.weight_bytes(weight_dtype) / tp
    kv_per_token = model.kv_bytes_per_token(kv_dtype)
    if draft is not None:
        kv_per_token += draft.kv_bytes_per_token(kv_dtype)
    num_blocks, free_per_gpu = _blocks(
        hardware.planning_memory * gpu_memory_utilization - weight_per_gpu
        - activation_reserve_bytes, kv_cache_bytes, block_size_tokens * kv_per_token / tp)
    return KvBudget(num_blocks=num_blocks, block_size_tokens=block_size_tokens,
                    kv_bytes_per_token=kv_per_token, weight_bytes_per_gpu=weight_per_gpu,
                    kv_bytes_per_gpu=max(free_per_gpu, 0.0))


def _blocks(free_bytes: float, kv_cache_bytes: float | None, block_bytes: float
            ) -> tuple[int, float]:
    """KV blocks of ``block_bytes`` a GPU holds in ``free_bytes`` (what its weights and
    reserve leave), and the bytes they are cut from: ``kv_cache_bytes`` where given and
    it fits (negative where it does not, so no block)."""
    if kv_cache_bytes is not None:
        free_bytes = kv_cache_bytes if kv_cache_bytes <= free_bytes else -kv_cache_bytes
    return (int(free_bytes // block_bytes) if free_bytes > 0 else 0), free_bytes


def stage_weight_bytes_per_gpu(model: ModelSpec, weight_dtype: str, tp: int, pp: int
                               ) -> list[float]:
    """Weight bytes on each GPU of each of ``pp`` stages: the stage's share of the layers
    and, on the first stage the embedding and on the last the LM head (one matrix each,
    a tied LM head loaded again on the last stage), over ``tp`` GPUs."""
    layers_bytes, edges_bytes = model.weight_bytes_split(weight_dtype)
    one_edge = edges_bytes if model.tied_embeddings else edges_bytes / 2.0
    split = stage_layers(model.num_layers, pp)
    out = []
    for s, layers in enumerate(split):
        edges = (one_edge if s == 0 else 0.0) + (one_edge if s == pp - 1 else 0.0)
        out.append((layers_bytes * layers / model.num_layers + edges) / tp)
    return out


def weights_per_gpu(model: ModelSpec, weight_dtype: str, tp: int, pp: int) -> float:
    """Weight bytes on each GPU of the fullest stage (all of them over tp at pp = 1)."""
    if pp == 1:
        return model.weight_bytes(weight_dtype) / tp
    return max(stage_weight_bytes_per_gpu(model, weight_dtype, tp, pp))


def pp_kv_budget(model: ModelSpec, hardware: HardwareSpec, *, tp: int, pp: int,
                 weight_dtype: str, kv_dtype: str, block_size_tokens: int,
                 gpu_memory_utilization: float, activation_reserve_bytes: float,
                 kv_cache_bytes: float | None, draft: ModelSpec | None = None) -> KvBudget:
    """``kv_budget`` over ``pp`` stages: per stage s with ℓ_s of the L layers,

        free_s   = reported memory·utilisation − weights_s/tp − reserve
        block_s  = block · kv · (ℓ_s / L) / tp
        blocks   = min over s of ⌊free_s / block_s⌋

    A draft model is spread over the stages evenly (its weights and KV over tp·pp).
    ``weight_bytes_per_gpu`` is the largest stage's (it loads last at a cold start),
    ``kv_bytes_per_gpu`` the tightest stage's."""
    usable = hardware.planning_memory * gpu_memory_utilization
    kv_per_token = model.kv_bytes_per_token(kv_dtype)
    draft_weights = draft_kv = 0.0
    if draft is not None:
        draft_weights = draft.weight_bytes(weight_dtype) / (tp * pp)
        draft_kv = draft.kv_bytes_per_token(kv_dtype)
    weights = stage_weight_bytes_per_gpu(model, weight_dtype, tp, pp)
    best: tuple[int, float] | None = None          # (blocks, free bytes) of the tightest
    for layers, weight in zip(stage_layers(model.num_layers, pp), weights):
        block = block_size_tokens * (kv_per_token * layers / model.num_layers
                                     + draft_kv / pp) / tp
        blocks, free = _blocks(usable - weight - draft_weights - activation_reserve_bytes,
                               kv_cache_bytes, block)
        if best is None or blocks < best[0]:
            best = (blocks, free)
    assert best is not None
    return KvBudget(num_blocks=best[0], block_size_tokens=block_size_tokens,
                    kv_bytes_per_token=kv_per_token + draft_kv,
                    weight_bytes_per_gpu=max(weights) + draft_weights,
                    kv_bytes_per_gpu=max(best[1], 0.0))
