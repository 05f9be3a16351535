"""Pipeline parallelism: a replica's layers split into ``pp`` stages of ``tp`` GPUs each.

A replica with ``pp`` stages holds ``tp x pp`` GPUs. Its layers are split as vLLM's
``get_pp_indices`` splits them: every stage takes ⌊L/pp⌋ of the L layers and the
L mod pp left over go one each to the stages just before the last (which also holds the
final norm and the LM head; the first holds the embedding). Stages fill a node's
``max_gpus_per_node`` GPUs in order, k = max(1, ⌊G/tp⌋) stages a node, so the send from
stage s to s+1 crosses to another node when ⌊s/k⌋ ≠ ⌊(s+1)/k⌋. Memory is counted per
stage in ``sim.cost.memory.pp_kv_budget``.

Step time. vLLM keeps up to ``pp`` batches in flight, one per virtual engine, and a
sequence is in at most one of them (its next token needs the last one). The scheduler
here plans one step of every running sequence; under pp that step is one period of the
micro-batches going round the pipeline. For a step of shape (n tokens, m sequences,
prefill work W, decode keys K, keys read R) and the inner (one-stage) cost model:

    M     = min(pp, ⌊m⌋)                       micro-batches the running sequences fill
                                                (m counts rows: logits and per-row
                                                overhead; a speculative step's M counts
                                                its sequences, not its draft rows, since
                                                one sequence's verify pass is not split)
    share = (n, m, W, K, R) / M                equal micro-batches
    T1    = inner step time of the share        overhead + L·y + lm_head, as at pp = 1
    h     = overhead(m/M) + engine_host(share)  host side, once per micro-batch (an
                                                engine's host work: a calibrated
                                                profile's per-prefill-step seconds)
    d     = lm_head(m/M)
    y     = (T1 − h − d) / L                    one layer of the share; it holds the
                                                engine's GPU work too (a calibrated
                                                per-key term, an attention kernel over
                                                the packed batch), spread over layers
    c_s   = ℓ_s·y  (+ d on the last stage)      stage s's compute
    x_s   = λ_s + a / (tp·B_s),  a = 2·(n/M)·hidden·2 bytes
                                                the send from stage s to s+1: hidden
                                                states and residual in bf16, each of the
                                                stage's tp GPUs sending its 1/tp slice
                                                (vLLM's send_tensor_dict with the TP
                                                all-gather) over NVLink within a node
                                                (λ = allreduce_latency, B = half of
                                                interconnect_bandwidth) or the network
                                                across nodes (internode_latency and
                                                internode_bandwidth); B at the roofline's
                                                interconnect_efficiency over NVLink (its
                                                all-reduce fit) and at the hardware's
                                                internode_efficiency over the network
    T_trav = T1 + Σ_{s<pp−1} x_s                one micro-batch through every stage
    t_b   = max(h, max_s (c_s + x_s))           the busiest resource (x_{pp−1} = 0)
    step  = max(T_trav, M·t_b)

M micro-batches going round a cycle of resources with fixed times each complete a pass
every max(T_trav, M·t_b): none faster than its own traversal, and the busiest resource
serves M of them per period. Every running sequence gains its tokens once per period, so
that is the step; TPOT is the period and a lone request (M = 1) pays the whole traversal,
the other stages idle: the bubble. With enough sequences (M = pp) each stage reads its
weights once a micro-batch, pp times a period, and no period is shorter than one
micro-batch's traversal of every layer: at the same GPU count tensor parallelism, which
splits the weight reads, steps faster. Pipeline stages buy memory (each GPU holds about
1/pp of the weights and KV), not speed. The step's FLOPs and bytes are M times the
share's (each micro-batch reads every stage's weights).

Approximations: the micro-batches are equal shares of the step (vLLM's hold whichever
sequences its scheduler put in each, and one long prefill chunk cannot be split); a
token appears at the end of the period, up to M·t_b − T_trav after its micro-batch left
the last stage; the all-gather of the received slices among a stage's tp GPUs is left
out. At pp = 1 no wrapper is built: step times are the inner model's, bit for bit.
"""
from __future__ import annotations

import math

import numpy as np

from sim.config.specs import HardwareSpec, ModelSpec
from sim.cost.base import CostModel, InnerTerms
from sim.cost.roofline import ACTIVATION_BYTES, FITTED
from sim.cost.shape import ArrayLike, BatchShape

# tensors a stage sends the next per token: the hidden states and the residual (Llama)
PP_SEND_TENSORS = 2


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers of each of ``pp`` stages: ⌊L/pp⌋ each, the remainder one each to the stages
    before the last, nearest it first (126 layers over 4 stages: 31, 32, 32, 31)."""
    base, extra = divmod(num_layers, pp)
    layers = [base] * pp
    for i in range(extra):
        layers[pp - 2 - i] += 1
    return layers


def stages_per_node(tp: int, gpus_per_node: int) -> int:
    return max(1, gpus_per_node // tp)


def num_nodes(tp: int, pp: int, gpus_per_node: int) -> int:
    """Nodes a replica of ``pp`` stages of ``tp`` GPUs spans."""
    return math.ceil(pp / stages_per_node(tp, gpus_per_node))


def crosses_node(stage: int, tp: int, gpus_per_node: int) -> bool:
    """Whether the send from ``stage`` to the next leaves its node."""
    k = stages_per_node(tp, gpus_per_node)
    return stage // k != (stage + 1) // k


class PipelineCostModel(InnerTerms, CostModel):
    """Step times of ``pp`` stages around an ``inner`` model of the whole layer stack on
    one stage's ``tp`` GPUs (the module docstring gives the equations)."""

    decode_time_linear = False      # a maximum of two lines in the keys read

    def __init__(self, inner: CostModel, model: ModelSpec, hardware: HardwareSpec, tp: int,
                 pp: int) -> None:
        self.inner = inner
        self.tp = tp
        self.pp = pp
        self.num_layers = model.num_layers
        self.after_idle_s = inner.after_idle_s
        self.measures_engine = inner.measures_engine
        self.layers_per_stage = stage_layers(model.num_layers, pp)
        nvlink_efficiency = getattr(getattr(inner, "cfg", None), "interconnect_efficiency",
                                    FITTED["interconnect_efficiency"])
        bytes_per_token = PP_SEND_TENSORS * model.hidden_size * ACTIVATION_BYTES / tp
        self.send_latency_s: list[float] = []        # per send s -> s+1
        self.send_s_per_token: list[float] = []
        for s in range(pp - 1):
            if crosses_node(s, tp, hardware.max_gpus_per_node):
                if hardware.internode_bandwidth is None:
                    raise ValueError(f"{hardware.name} gives no internode_bandwidth: "
                                     f"{pp} stages of tp={tp} span several nodes")
                latency = hardware.internode_latency
                link = hardware.internode_bandwidth * hardware.internode_efficiency
            else:
                latency = hardware.allreduce_latency
                link = hardware.interconnect_bandwidth / 2 * nvlink_efficiency
            self.send_latency_s.append(latency)
            self.send_s_per_token.append(bytes_per_token / link)
        self._plain_engine = (type(inner).engine_s is CostModel.engine_s
                              and type(inner).engine_host_s is CostModel.engine_host_s)

    @property
    def label(self) -> str:
        return self.inner.label

    @property
    def peak_flops_per_gpu(self) -> float:
        return self.inner.peak_flops_per_gpu

    @property
    def peak_bytes_per_s_per_gpu(self) -> float:
        return self.inner.peak_bytes_per_s_per_gpu

    # -- the inner model's terms (one layer, one shard), as they are ---------------------
    # (the other terms are the inner model's: InnerTerms)
    def overhead_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self.inner.overhead_s(num_seqs)

    # -- the pipeline ----------------------------------------------------------------
    def micro_batches(self, num_seqs: ArrayLike) -> ArrayLike:
        """M = min(pp, ⌊m⌋), at least 1."""
        return np.minimum(float(self.pp), np.maximum(1.0, np.floor(num_seqs)))

    def period_s(self, whole_s, host_s, head_s, tokens_share, micro, maximum=max):
        """``step`` of the module docstring from the share's T1 (``whole_s``), h, d, n/M
        and M; plain floats (``maximum=max``) or arrays (``np.maximum``)."""
        per_layer = (whole_s - host_s - head_s) / self.num_layers
        busiest, sends = host_s, 0.0
        last = self.pp - 1
        for s, layers in enumerate(self.layers_per_stage):
            stage = layers * per_layer
            if s == last:
                stage = stage + head_s
            else:
                send = self.send_latency_s[s] + self.send_s_per_token[s] * tokens_share
                sends = sends + send
                stage = stage + send
            busiest = maximum(busiest, stage)
        return maximum(whole_s + sends, micro * busiest)

    def _share(self, shape: BatchShape, micro) -> BatchShape:
        kv_read = None if shape.kv_read_tokens is None else shape.kv_read_tokens / micro
        return BatchShape(shape.num_tokens / micro, shape.num_seqs / micro,
                          shape.prefill_attn_work / micro, shape.decode_kv_tokens / micro,
                          kv_read)

    def step_time_s(self, shape: BatchShape) -> ArrayLike:
        micro = self.micro_batches(np.asarray(shape.num_seqs, dtype=np.float64))
        share = self._share(shape, micro)
        inner = self.inner
        host = inner.overhead_s(share.num_seqs) + inner.engine_host_s(share)
        return self.period_s(inner.step_time_s(share), host, inner.lm_head_s(share.num_seqs),
                             share.num_tokens, micro, np.maximum)

    def work(self, shape: BatchShape) -> tuple[ArrayLike, ArrayLike]:
        micro = self.micro_batches(np.asarray(shape.num_seqs, dtype=np.float64))
        flops, moved = self.inner.work(self._share(shape, micro))
        return micro * flops, micro * moved

    def step_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float, kv_read_tokens: float | None = None,
                    sequences: float | None = None) -> tuple[float, float, float]:
        rows_of = num_seqs if sequences is None else sequences
        micro = float(min(self.pp, max(1, int(rows_of))))
        n, m = num_tokens / micro, num_seqs / micro
        work, kv = prefill_attn_work / micro, decode_kv_tokens / micro
        read = None if kv_read_tokens is None else kv_read_tokens / micro
        inner = self.inner
        whole_s, flops, moved = inner.step_scalar(n, m, work, kv, read)
        host = float(inner.overhead_s(m))
        if not self._plain_engine:
            host += float(np.asarray(inner.engine_host_s(BatchShape(n, m, work, kv, read))))
        time_s = self.period_s(whole_s, host, float(inner.lm_head_s(m)), n, micro)
        return float(time_s), micro * flops, micro * moved


def pipelined(cost: CostModel, model: ModelSpec, hardware: HardwareSpec, tp: int,
              pp: int) -> CostModel:
    """``cost`` itself at one stage, else its pipeline of ``pp`` stages."""
    return cost if pp == 1 else PipelineCostModel(cost, model, hardware, tp, pp)
