"""A Llama-shaped transformer in plain torch, built from a model profile.

Random weights, no checkpoint. The pieces of one layer are plain functions
so the microbenchmarks (``calibrate.microbench.bench``, ``calibrate.microbench.forwards``) time exactly the code the
whole model runs:

- ``dense_pre``: RMSNorm, the fused QKV projection, rotary embedding;
- ``attention``: write the new K/V into the layer's cache, then
  ``scaled_dot_product_attention`` over the cache (causal within a prefill
  chunk, grouped-query heads);
- ``dense_post``: the O projection, residual, RMSNorm, the SwiGLU MLP (or
  the routed experts of a mixture-of-experts layer), residual;
- ``lm_head``: the final RMSNorm and the vocabulary projection of the last
  token of each sequence (an engine computes logits only for those).

Shapes are those of one tensor-parallel shard (``ShardShape``): the
collectives between shards are timed separately.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from calibrate.fitting.shapes import ShardShape

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ROPE_THETA = 500000.0


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype '{name}'; choose one of {', '.join(DTYPES)}") from None


def _weight(out_features: int, in_features: int, device, dtype, *lead: int) -> torch.Tensor:
    w = torch.randn(*lead, out_features, in_features, device=device, dtype=torch.float32)
    return w.mul_(in_features ** -0.5).to(dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


class Rope:
    """Rotary position embedding tables up to ``max_positions``."""

    def __init__(self, head_dim: int, max_positions: int, device, dtype) -> None:
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device,
                                                 dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_positions, device=device, dtype=torch.float32), inv)
        self.cos = freqs.cos().to(dtype)
        self.sin = freqs.sin().to(dtype)

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x``: [tokens, heads, head_dim]; ``positions``: [tokens]."""
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class LayerWeights:
    """One layer's weights on one shard (random, scaled to keep activations tame)."""

    def __init__(self, shard: ShardShape, device, dtype) -> None:
        d, hd = shard.hidden, shard.head_dim
        self.shard = shard
        self.ln1 = torch.ones(d, device=device, dtype=dtype)
        self.ln2 = torch.ones(d, device=device, dtype=dtype)
        self.w_qkv = _weight((shard.heads + 2 * shard.kv_heads) * hd, d, device, dtype)
        self.w_o = _weight(d, shard.heads * hd, device, dtype)
        if shard.num_experts == 1:
            self.w_router = None
            self.w_gate_up = _weight(2 * shard.ffn, d, device, dtype)
            self.w_down = _weight(d, shard.ffn, device, dtype)
        else:
            e = shard.num_experts
            self.w_router = _weight(e, d, device, dtype)
            self.w_gate_up = _weight(2 * shard.ffn, d, device, dtype, e)
            self.w_down = _weight(d, shard.ffn, device, dtype, e)

    def nbytes(self) -> int:
        tensors = [self.ln1, self.ln2, self.w_qkv, self.w_o, self.w_gate_up, self.w_down]
        if self.w_router is not None:
            tensors.append(self.w_router)
        return sum(t.numel() * t.element_size() for t in tensors)


def dense_pre(w: LayerWeights, h: torch.Tensor, positions: torch.Tensor, rope: Rope):
    """RMSNorm, QKV projection and rotary embedding of ``h`` [tokens, hidden]."""
    s = w.shard
    n = h.shape[0]
    qkv = F.linear(rms_norm(h, w.ln1), w.w_qkv)
    q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim,
                         s.kv_heads * s.head_dim], dim=-1)
    q = rope.apply(q.view(n, s.heads, s.head_dim), positions)
    k = rope.apply(k.view(n, s.kv_heads, s.head_dim), positions)
    return q, k, v.view(n, s.kv_heads, s.head_dim)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
              v_cache: torch.Tensor, context: int) -> torch.Tensor:
    """Attention of ``B`` sequences, each with ``n`` new tokens after ``context`` cached ones.

    ``q`` is [B·n, heads, head_dim], ``k``/``v`` [B·n, kv_heads, head_dim];
    the caches are [B, kv_heads, ≥ context + n, head_dim]. The new K/V are
    written into the caches (as an engine does), then each new token attends
    to the context and, causally, to the chunk. Returns [B·n, heads·head_dim].
    """
    batch, kv_heads, _, head_dim = k_cache.shape
    n = q.shape[0] // batch
    heads = q.shape[1]
    end = context + n
    k_cache[:, :, context:end] = k.view(batch, n, kv_heads, head_dim).transpose(1, 2)
    v_cache[:, :, context:end] = v.view(batch, n, kv_heads, head_dim).transpose(1, 2)
    qh = q.view(batch, n, heads, head_dim).transpose(1, 2)
    keys, values = k_cache[:, :, :end], v_cache[:, :, :end]
    gqa = heads != kv_heads
    if n == 1:
        out = F.scaled_dot_product_attention(qh, keys, values, enable_gqa=gqa)
    elif context == 0:
        out = F.scaled_dot_product_attention(qh, keys, values, is_causal=True, enable_gqa=gqa)
    else:
        out = F.scaled_dot_product_attention(qh, keys, values,
                                             attn_mask=causal_lower_right(n, end),
                                             enable_gqa=gqa)
    return out.transpose(1, 2).reshape(batch * n, heads * head_dim)


def _mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)


def _moe(w: LayerWeights, x: torch.Tensor) -> torch.Tensor:
    """Top-k routed experts: tokens grouped by expert, one GEMM chain per expert hit."""
    s = w.shard
    k = s.experts_per_token
    scores, chosen = F.linear(x, w.w_router).topk(k, dim=-1)
    gates = scores.softmax(dim=-1).to(x.dtype)
    flat = chosen.reshape(-1)
    order = flat.argsort()
    token_of = order // k
    counts = torch.bincount(flat, minlength=s.num_experts).tolist()   # one host sync
    out = torch.zeros_like(x)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        rows = token_of[start:start + count]
        y = _mlp(x[rows], w.w_gate_up[expert], w.w_down[expert])
        out.index_add_(0, rows, y * gates.reshape(-1)[order[start:start + count]].unsqueeze(1))
        start += count
    return out


def dense_post(w: LayerWeights, attn_out: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """O projection, residual, RMSNorm, MLP (or experts), residual."""
    h = h + F.linear(attn_out, w.w_o)
    x = rms_norm(h, w.ln2)
    mlp = _mlp(x, w.w_gate_up, w.w_down) if w.w_router is None else _moe(w, x)
    return h + mlp


def lm_head(h_last: torch.Tensor, norm: torch.Tensor, w_head: torch.Tensor) -> torch.Tensor:
    return F.linear(rms_norm(h_last, norm), w_head)


class LlamaLike:
    """The whole model (one shard's shapes): embeddings, layers, final norm, LM head."""

    def __init__(self, shard: ShardShape, device="cpu", dtype=torch.float32,
                 num_layers: int | None = None, max_positions: int = 8192,
                 seed: int = 0) -> None:
        torch.manual_seed(seed)
        d = shard.hidden
        self.shard = shard
        self.device = torch.device(device)
        self.dtype = dtype
        self.num_layers = num_layers or shard.model.num_layers
        self.embed = _weight(d, shard.vocab, device, dtype).T.contiguous()   # [vocab, hidden]
        self.layers = [LayerWeights(shard, device, dtype) for _ in range(self.num_layers)]
        self.final_norm = torch.ones(d, device=device, dtype=dtype)
        self.w_head = _weight(shard.vocab, d, device, dtype)
        self.rope = Rope(shard.head_dim, max_positions, device, dtype)

    def new_cache(self, batch: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, K and V caches [batch, kv_heads, length, head_dim] (random contents)."""
        s = self.shard
        shape = (batch, s.kv_heads, length, s.head_dim)
        return [(torch.randn(shape, device=self.device, dtype=self.dtype),
                 torch.randn(shape, device=self.device, dtype=self.dtype))
                for _ in range(self.num_layers)]

    def _layers(self, h, positions, cache, context):
        for w, (k_cache, v_cache) in zip(self.layers, cache):
            q, k, v = dense_pre(w, h, positions, self.rope)
            h = dense_post(w, attention(q, k, v, k_cache, v_cache, context), h)
        return h

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, context: int, cache) -> torch.Tensor:
        """One sequence's chunk of ``len(tokens)`` tokens after ``context`` cached ones."""
        n = tokens.shape[0]
        positions = torch.arange(context, context + n, device=self.device)
        h = self._layers(self.embed[tokens], positions, cache, context)
        return lm_head(h[-1:], self.final_norm, self.w_head)

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, context: int, cache) -> torch.Tensor:
        """One new token for each of ``len(tokens)`` sequences with ``context`` cached tokens."""
        positions = torch.full((tokens.shape[0],), context, device=self.device, dtype=torch.long)
        h = self._layers(self.embed[tokens], positions, cache, context)
        return lm_head(h, self.final_norm, self.w_head)
