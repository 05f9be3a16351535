"""Checks of a pool's pipeline stages (``pp``) against its model and GPUs, for
``sim.config.resolve``: every stage needs a layer, and stages on several nodes need a
network between them; and where a model does not fit, the pp at which it would."""
from __future__ import annotations

from sim.config.specs import HardwareSpec, ModelSpec
from sim.cost.memory import weights_per_gpu
from sim.cost.pipeline import num_nodes

# the most stages a hint looks at (far past any model's need: 405B in bf16 on 8 GB GPUs)
MAX_HINT_PP = 128


def too_many_stages(model: ModelSpec, pp: int) -> str | None:
    """Why ``pp`` stages cannot split ``model``, or None."""
    if pp <= model.num_layers:
        return None
    return (f"pp={pp} exceeds {model.name}'s {model.num_layers} layers: each pipeline stage "
            "holds at least one layer")


def draft_too_shallow(draft: ModelSpec, pp: int) -> str | None:
    """Why ``pp`` stages cannot split a speculative pool's ``draft`` model (it is split
    over the same stages), or None."""
    if pp <= draft.num_layers:
        return None
    return (f"pp={pp} exceeds the draft model {draft.name}'s {draft.num_layers} layers: the "
            "draft model is split over the same pipeline stages, and each stage holds at "
            "least one of its layers")


def decode_stages(pool: str, served: str, pp: int) -> str | None:
    """Why a disaggregated model's decode ``pool`` cannot have ``pp`` stages, or None."""
    if pp == 1:
        return None
    return (f"pool '{pool}' decodes for '{served}' (disaggregated) with pp={pp}: vLLM's KV "
            "connector for disaggregation (NixlConnector) does not support pipeline stages "
            "on the decode side")


def unreachable_nodes(hw: HardwareSpec, tp: int, pp: int) -> str | None:
    """Why ``pp`` stages of ``tp`` GPUs cannot be placed on ``hw``'s nodes, or None."""
    nodes = num_nodes(tp, pp, hw.max_gpus_per_node)
    if nodes == 1 or hw.internode_bandwidth is not None:
        return None
    return (f"tp x pp = {tp * pp} GPUs span {nodes} nodes of {hw.max_gpus_per_node} "
            f"{hw.name}, and its hardware profile gives no internode_bandwidth for the "
            f"activations sent between stages on different nodes: keep tp x pp within "
            f"{hw.max_gpus_per_node} GPUs or give the network's figure in a hardware "
            "profile of the scenario's own (internode_bandwidth, e.g. 50GB/s)")


def fitting_pp(model: ModelSpec, hw: HardwareSpec, tp: int, pp: int, weight_dtype: str,
               usable_bytes: float, reserve_bytes: float) -> int | None:
    """The fewest stages above ``pp`` at which every stage's weights per GPU leave room
    beside ``reserve_bytes`` in ``usable_bytes``, on nodes ``hw`` can link; None if none
    up to the model's layers does."""
    for more in range(pp + 1, min(model.num_layers, MAX_HINT_PP) + 1):
        if unreachable_nodes(hw, tp, more) is not None:
            return None
        if weights_per_gpu(model, weight_dtype, tp, more) + reserve_bytes < usable_bytes:
            return more
    return None
