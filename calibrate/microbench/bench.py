"""Torch microbenchmarks of one transformer layer's own shapes.

Each term of the step-time model is timed on its own, for one layer on one
tensor-parallel shard (``ShardShape``), with the code of ``calibrate.microbench.model``:

- ``dense``: the layer without its attention kernel (norms, QKV, rotary, O,
  MLP or routed experts, residuals) for token counts 1..max_tokens;
- ``attn_prefill``: one sequence's chunk after a cached context, for
  (chunk, context) pairs; x = chunk·(context + chunk/2);
- ``attn_decode``: one new token for each of a batch of sequences, for
  (batch, context) pairs; x = batch·(context + 1) KV tokens read;
- ``lm_head``: final norm and vocabulary projection for sequence counts;
- ``tp_comm``: two all-reduces of tokens × hidden activations, only when
  ``tp`` > 1 and that many GPUs are visible (otherwise not measured).

Whole forwards of the plain-torch model (``calibrate.microbench.forwards``) give the
per-step overhead left over by the terms; how calls are timed is
``calibrate.microbench.timing``'s.
"""
from __future__ import annotations

import json
import math
import os
import socket
import statistics
import tempfile
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from calibrate.microbench import model as M
from calibrate.fitting.shapes import ShardShape
from calibrate.microbench.timing import Call, Factory, Log, Settings, Timer, copies


def log_grid(lo: int, hi: int, per_octave: float = 2) -> list[int]:
    """Integers from lo to hi, about ``per_octave`` per doubling, ends included."""
    if hi < lo:
        return []
    out = {lo, hi}
    steps = max(1, round(math.log2(hi / lo) * per_octave))
    for i in range(steps + 1):
        out.add(int(round(lo * (hi / lo) ** (i / steps))))
    return sorted(out)


@dataclass
class Grids:
    dense: list[int]
    prefill: list[tuple[int, int]]      # (chunk, context)
    decode: list[tuple[int, int]]       # (batch, context)
    lm_head: list[int]
    tp_comm: list[int]
    forward_prefill: list[int]          # whole forwards: one sequence of n tokens
    forward_decode: list[tuple[int, int]]  # whole forwards: (batch, context)


def grids(shard: ShardShape, s: Settings) -> Grids:
    max_len = shard.model.max_model_len
    budget = s.max_tokens
    if s.quick:
        chunks = [c for c in (1, 4, 16, 64, 256) if c <= budget]
        prefill = [(c, 0) for c in chunks] + [(c, x) for c in (16, 64) for x in (64, 256)
                                               if c <= budget and c + x <= max_len]
        decode = [(b, c) for b in (1, 4, 16) for c in (16, 128, 512) if c + 1 <= max_len]
        return Grids(dense=log_grid(1, budget, 1), prefill=prefill, decode=decode,
                     lm_head=log_grid(1, s.max_seqs, 1), tp_comm=log_grid(1, budget, 1),
                     forward_prefill=[1, 16, 64, 256], forward_decode=[(1, 64), (8, 64),
                                                                        (32, 64)])
    gpu = s.device == "cuda"
    contexts = [x for x in ((512, 2048, 8192, 32768) if gpu else (512, 2048)) if x < max_len]
    prefill = [(c, 0) for c in log_grid(1, budget, 1)]
    prefill += [(c, x) for x in contexts for c in log_grid(16, budget, 0.5)
                if c + x <= max_len]
    max_kv = (1 << 20) if gpu else (1 << 17)
    dctx = [x for x in ((16, 128, 512, 2048, 8192, 32768) if gpu else (16, 128, 512, 2048))
            if x < max_len]
    decode = [(b, c) for b in log_grid(1, s.max_seqs, 0.5) for c in dctx
              if b * (c + 1) <= max_kv]
    fwd_prefill = [n for n in ((1, 4, 16, 64, 256, 1024, 4096) if gpu
                               else (1, 4, 16, 64, 256, 1024)) if n <= budget]
    fwd_decode = [(b, 256) for b in ((1, 8, 64, 256) if gpu else (1, 4, 16, 64))
                  if b <= s.max_seqs]
    return Grids(dense=log_grid(1, budget, 2), prefill=prefill, decode=decode,
                 lm_head=log_grid(1, s.max_seqs, 2), tp_comm=log_grid(1, budget, 1),
                 forward_prefill=fwd_prefill, forward_decode=fwd_decode)


# -- the terms ----------------------------------------------------------------------------
@dataclass
class Point:
    x: float                 # the term's argument (tokens, work, KV tokens, sequences)
    seconds: float
    meta: dict = field(default_factory=dict)


@dataclass
class Case:
    """One size of one term (or one whole forward) to time."""
    term: str
    x: float
    meta: dict
    factory: Factory
    wall: bool = False       # a whole step that synchronises itself (GPU: wall clock)


def _dense_factories(shard: ShardShape, s: Settings, tokens: list[int]
                     ) -> tuple[list[Factory], str]:
    dev, dt = s.device, s.torch_dtype
    probe = M.LayerWeights(shard, dev, dt)
    n_copies = copies(probe.nbytes(), s, shard.model.num_layers)
    layers = [probe] + [M.LayerWeights(shard, dev, dt) for _ in range(n_copies - 1)]
    rope = M.Rope(shard.head_dim, max(tokens) + 1, dev, dt)

    def factory(n: int) -> Factory:
        def make() -> Call:
            h = torch.randn(n, shard.hidden, device=dev, dtype=dt)
            a = torch.randn(n, shard.heads * shard.head_dim, device=dev, dtype=dt)
            pos = torch.arange(n, device=dev)

            def call(i: int):
                w = layers[i % n_copies]
                M.dense_pre(w, h, pos, rope)
                return M.dense_post(w, a, h)
            return call
        return make

    return [factory(n) for n in tokens], (f"{n_copies} weight copies of "
                                          f"{probe.nbytes() / 1e6:.1f} MB")


def _attention_factory(shard: ShardShape, s: Settings, batch: int, n: int,
                       context: int) -> Factory:
    def make() -> Call:
        dev, dt = s.device, s.torch_dtype
        length = context + n
        cache_bytes = 2 * batch * shard.kv_heads * length * shard.head_dim * dt.itemsize
        n_copies = copies(cache_bytes, s, shard.model.num_layers)
        shape = (batch, shard.kv_heads, length, shard.head_dim)
        caches = [(torch.randn(shape, device=dev, dtype=dt),
                   torch.randn(shape, device=dev, dtype=dt)) for _ in range(n_copies)]
        q = torch.randn(batch * n, shard.heads, shard.head_dim, device=dev, dtype=dt)
        k = torch.randn(batch * n, shard.kv_heads, shard.head_dim, device=dev, dtype=dt)
        v = torch.randn_like(k)

        def call(i: int):
            kc, vc = caches[i % n_copies]
            return M.attention(q, k, v, kc, vc, context)
        return call
    return make


def _lm_head_factories(shard: ShardShape, s: Settings, seqs: list[int]
                       ) -> tuple[list[Factory], str]:
    dev, dt = s.device, s.torch_dtype
    probe = M._weight(shard.vocab, shard.hidden, dev, dt)
    n_copies = copies(probe.numel() * probe.element_size(), s, 4)
    heads = [probe] + [M._weight(shard.vocab, shard.hidden, dev, dt) for _ in range(n_copies - 1)]
    norm = torch.ones(shard.hidden, device=dev, dtype=dt)

    def factory(n: int) -> Factory:
        def make() -> Call:
            h = torch.randn(n, shard.hidden, device=dev, dtype=dt)
            return lambda i: M.lm_head(h, norm, heads[i % n_copies])
        return make

    return [factory(n) for n in seqs], f"{n_copies} weight copies"


def term_cases(shard: ShardShape, s: Settings, g: Grids, log: Log | None = None) -> list[Case]:
    """Cases for the dense, attn_prefill, attn_decode and lm_head terms over ``g``."""
    dense, dense_what = _dense_factories(shard, s, g.dense) if g.dense else ([], "")
    head, head_what = _lm_head_factories(shard, s, g.lm_head) if g.lm_head else ([], "")
    cases = [Case("dense", n, {"tokens": n}, f) for n, f in zip(g.dense, dense)]
    cases += [Case("attn_prefill", c * (x + c / 2.0), {"chunk": c, "context": x},
                   _attention_factory(shard, s, 1, c, x)) for c, x in g.prefill]
    cases += [Case("attn_decode", b * (x + 1), {"batch": b, "context": x},
                   _attention_factory(shard, s, b, 1, x)) for b, x in g.decode]
    cases += [Case("lm_head", n, {"seqs": n}, f) for n, f in zip(g.lm_head, head)]
    if log is not None:
        log(f"  dense: {len(g.dense)} token counts ({dense_what}); attn_prefill: "
            f"{len(g.prefill)} (chunk, context) pairs; attn_decode: {len(g.decode)} "
            f"(batch, context) pairs; lm_head: {len(g.lm_head)} sequence counts ({head_what})")
    return cases


def measure_cases(cases: list[Case], timer: Timer, log: Log | None = None) -> list[float]:
    """Median seconds of every case, all timed in the same interleaved rounds."""
    return timer.measure([c.factory for c in cases], [c.wall for c in cases], log)


def points(cases: list[Case], seconds: list[float], term: str) -> list[Point]:
    return [Point(c.x, t, c.meta) for c, t in zip(cases, seconds) if c.term == term]


def bench_dense(shard: ShardShape, s: Settings, tokens: list[int], timer: Timer) -> list[Point]:
    """The dense term alone, for token counts ``tokens``."""
    cases = term_cases(shard, s, Grids(tokens, [], [], [], [], [], []))
    return points(cases, measure_cases(cases, timer), "dense")


def _allreduce_worker(rank: int, world: int, port: int, hidden: int, dtype_name: str,
                      tokens: list[int], warmup: int, repeats: int, result_path: str) -> None:

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    dtype = M.torch_dtype(dtype_name)
    results = []
    for n in tokens:
        x = torch.randn(n, hidden, device="cuda", dtype=dtype)
        for _ in range(warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        times = []
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dist.all_reduce(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        results.append([n, 2.0 * statistics.median(times)])   # two all-reduces per layer
    if rank == 0:
        with open(result_path, "w", encoding="utf-8") as fh:
            json.dump(results, fh)
    dist.destroy_process_group()


def bench_tp_comm(shard, s, tokens, log) -> tuple[list[Point], bool]:
    """Two all-reduces per layer over ``tp`` GPUs; zeros (not measured) otherwise."""
    if s.tp == 1:
        return [Point(n, 0.0, {"tokens": n}) for n in tokens], True
    if s.device != "cuda" or torch.cuda.device_count() < s.tp:
        visible = torch.cuda.device_count() if s.device == "cuda" else 0
        log(f"  tp_comm: not measured ({visible} GPU(s) visible, tp={s.tp}); recorded as zero")
        return [Point(n, 0.0, {"tokens": n}) for n in tokens], False

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "allreduce.json")
        mp.spawn(_allreduce_worker, nprocs=s.tp,
                 args=(s.tp, port, shard.hidden, s.dtype, list(tokens), s.warmup,
                       max(10, s.rounds * s.min_per_round), path))
        with open(path, encoding="utf-8") as fh:
            rows = json.load(fh)
    log(f"  tp_comm: {len(rows)} points over {s.tp} GPUs")
    return [Point(n, t, {"tokens": n}) for n, t in rows], True
