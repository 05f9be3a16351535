"""Whether a model fits a pool's GPUs: tp splits its attention heads, and its weights
leave room for a KV block (and if not, the field at fault and what would fit)."""
from __future__ import annotations

from sim.config import stages
from sim.config.scenario import PoolConfig
from sim.cost.memory import weights_per_gpu


def splits_heads(model, tp: int) -> bool:
    """``tp`` GPUs share the attention heads evenly (KV heads split or replicated)."""
    return model.num_heads % tp == 0 and (model.num_kv_heads % tp == 0
                                          or tp % model.num_kv_heads == 0)


def valid_tps(model, hw) -> list[int]:
    return [t for t in range(1, hw.max_gpus_per_node + 1) if splits_heads(model, t)]


def no_room(model, hw, pool: PoolConfig) -> tuple[str, str]:
    """The field at fault and the message when a pool's replica has no KV block: the
    weights do not fit (a larger tp, if one fits, else no tp does and, if some does, the
    fewest pipeline stages at the widest tp that fit), or they fit but the
    requested kv_cache_bytes or the reserve do not."""
    gib = 2 ** 30
    usable = hw.planning_memory * pool.gpu_memory_utilization
    weights = model.weight_bytes(pool.weight_dtype)
    per_gpu = weights_per_gpu(model, pool.weight_dtype, pool.tp, pool.pp)
    at = f"tp={pool.tp}" + (f", pp={pool.pp}" if pool.pp > 1 else "")
    where = (f"{pool.tp * pool.pp} x {hw.name} ({hw.planning_memory / gib:.1f} GiB each as "
             f"the driver reports it, x gpu_memory_utilization {pool.gpu_memory_utilization:g} = "
             f"{usable / gib:.1f} GiB)")
    left = usable - per_gpu - pool.activation_reserve
    if per_gpu + pool.activation_reserve < usable:
        if pool.kv_cache_bytes:                 # the weights fit: the asked KV does not
            return "kv_cache_bytes", (
                f"kv_cache_bytes {pool.kv_cache_bytes / gib:.2f} GiB per GPU does not fit on "
                f"{where} beside {per_gpu / gib:.1f} GiB of {model.name} weights and "
                f"activation_reserve {pool.activation_reserve / gib:.2f} GiB: at most "
                f"{left / gib:.2f} GiB is left")
        return "activation_reserve", (        # a KV block is larger than what is left
            f"{model.name} on {where} leaves {left / gib:.3f} GiB for the KV cache after "
            f"{per_gpu / gib:.1f} GiB of weights and activation_reserve "
            f"{pool.activation_reserve / gib:.2f} GiB: less than one block")
    # (a larger tp whose pp stages could not be placed on linked nodes is no way out)
    larger = [t for t in valid_tps(model, hw) if t > pool.tp
              and stages.unreachable_nodes(hw, t, pool.pp) is None
              and weights_per_gpu(model, pool.weight_dtype, t, pool.pp)
              + pool.activation_reserve < usable]
    if larger:
        hint = f"; it fits at tp={larger[0]}"
    else:
        placed = "" if pool.pp == 1 else (
            f" that places its {pool.pp} stages" + ("" if hw.internode_bandwidth is not None
                                                   else " in one node"))
        hint = (f"; no tp up to the {hw.max_gpus_per_node} GPUs of one {hw.name} node"
                f"{placed} leaves room: choose a GPU with more memory or smaller weights "
                f"(weight_dtype fp8 or int4)")
        widest = max(valid_tps(model, hw), default=None)
        deeper = widest and stages.fitting_pp(model, hw, widest, pool.pp, pool.weight_dtype,
                                              usable, pool.activation_reserve)
        if deeper:
            hint += (f", or split its layers into pipeline stages: pp={deeper} at "
                     f"tp={widest} leaves room ({widest * deeper} GPUs a replica)")
    return "tp", (f"{model.name} ({pool.weight_dtype}, {weights / gib:.1f} GiB of weights, "
                  f"{per_gpu / gib:.1f} GiB per GPU at {at}) leaves no room for a KV "
                  f"cache on {where} with activation_reserve "
                  f"{pool.activation_reserve / gib:.2f} GiB{hint}")

