"""Torch microbenchmarks of one transformer layer's own shapes.

Each term of the step-time model is timed on its own, for one layer on one
tensor-parallel shard (``ShardShape``), with the code of ``calibrate.model``:

- ``dense``: the layer without its attention kernel (norms, QKV, rotary, O,
  MLP or routed experts, residuals) for token counts 1..max_tokens;
- ``attn_prefill``: one sequence's chunk after a cached context, for
  (chunk, context) pairs; x = chunk·(context + chunk/2);
- ``attn_decode``: one new token for each of a batch of sequences, for
  (batch, context) pairs; x = batch·(context + 1) KV tokens read;
- ``lm_head``: final norm and vocabulary projection for sequence counts;
- ``tp_comm``: two all-reduces of tokens × hidden activations, only when
  ``tp`` > 1 and that many GPUs are visible (otherwise not measured).

Whole forwards of the plain-torch model (``time_forwards``) give the
per-step overhead left over by the terms.

Timing: warm-up calls, then repeated calls, and the median of all of them.
The repeats of one term are taken in several interleaved rounds over all
its sizes, so that a slow spell of a shared machine lands on a few samples
of every size rather than on all samples of a few. Each call uses the next
of several copies of the weights or caches so that, as in a real forward
that walks every layer, a call does not find its operands in cache. CPU
timings use a fixed ``torch.set_num_threads``; GPU timings CUDA events.
"""
from __future__ import annotations

import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from calibrate import model as M
from calibrate.spec import ShardShape

Log = Callable[[str], None]
Call = Callable[[int], object]          # one timed call; the argument picks an operand copy
Factory = Callable[[], Call]            # allocates a case's operands, returns its call


@dataclass
class Settings:
    device: str = "cpu"
    dtype: str | None = None            # fp32 on CPU, bf16 on GPU
    tp: int = 1
    threads: int | None = None          # CPU only; default 1 (steady on a shared host)
    clock: str | None = None            # CPU: "thread" (CPU time of the one compute thread,
                                        # blind to other processes) or "wall"
    max_tokens: int | None = None       # token budget of a step: 2048 on CPU, 16384 on GPU
    max_seqs: int | None = None         # largest batch of sequences: 256 on CPU, 512 on GPU
    quick: bool = False                 # few points, small sizes (tests, smoke runs)
    warmup: int = 2                     # calls before the first timed one of each size
    rounds: int | None = None           # interleaved passes over a term's sizes
    min_per_round: int | None = None    # timed calls of one size in one round
    max_per_round: int = 20
    point_budget_s: float | None = None  # timed seconds aimed at per size, all rounds
    flush_bytes: int | None = None      # working set that evicts the caches
    memory_cap_bytes: int | None = None  # most memory for copies of weights / caches
    seed: int = 0

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got '{self.device}'")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' asked for but torch sees no CUDA device")
        gpu = self.device == "cuda"
        self.dtype = self.dtype or ("bf16" if gpu else "fp32")
        M.torch_dtype(self.dtype)
        if self.threads is None and not gpu:
            self.threads = 1
        if self.clock is None:
            self.clock = "thread" if not gpu and self.threads == 1 else "wall"
        if self.clock not in ("thread", "wall"):
            raise ValueError(f"clock must be 'thread' or 'wall', got '{self.clock}'")
        if self.clock == "thread" and (gpu or self.threads != 1):
            raise ValueError("clock 'thread' needs the CPU device and threads=1")
        if self.max_tokens is None:
            self.max_tokens = 256 if self.quick else (16384 if gpu else 2048)
        if self.max_seqs is None:
            self.max_seqs = 32 if self.quick else (512 if gpu else 256)
        if self.rounds is None:
            self.rounds = 2 if self.quick else (3 if gpu else 9)
        if self.min_per_round is None:
            self.min_per_round = 3 if gpu else 1
        if self.point_budget_s is None:
            self.point_budget_s = (0.02 if gpu else 0.05) if self.quick else (0.06 if gpu else 0.8)
        if self.quick:
            self.warmup = min(self.warmup, 1)
        if self.flush_bytes is None:
            self.flush_bytes = (256 << 20) if gpu else (128 << 20)
        if self.memory_cap_bytes is None:
            self.memory_cap_bytes = (16 << 30) if gpu else (1 << 30)

    @property
    def torch_dtype(self) -> torch.dtype:
        return M.torch_dtype(self.dtype)


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _keep_freed_memory() -> None:
    """Ask glibc to keep freed blocks for reuse instead of returning them to the OS.

    torch's CPU allocator is plain malloc: without this, every large
    activation is a fresh mmap whose page faults (slow and erratic on a
    virtual machine) land inside the timed calls.
    """
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    libc.mallopt(m_mmap_threshold, 32 << 20)     # glibc's largest allowed threshold
    libc.mallopt(m_trim_threshold, 1 << 30)
    libc.mallopt(m_top_pad, 64 << 20)


def setup(settings: Settings) -> None:
    """Fix thread counts, numerics and allocation behaviour before any timing."""
    if settings.device == "cpu":
        torch.set_num_threads(settings.threads)
        torch.set_flush_denormal(True)
        _keep_freed_memory()
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(settings.seed)


# -- timing -------------------------------------------------------------------------------
class Timer:
    """Times calls on the device.

    On a CPU with one compute thread the clock is, by default, that thread's
    CPU time: with one thread a call's CPU time is its duration on a core of
    its own, and other processes sharing the machine (a test run, a build)
    do not inflate it the way they inflate wall-clock time.
    """

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.gpu = settings.device == "cuda"
        self.clock = time.thread_time if settings.clock == "thread" else time.perf_counter

    def sync(self) -> None:
        if self.gpu:
            torch.cuda.synchronize()

    def _run(self, call: Call, start: int, count: int, wall: bool) -> list[float]:
        """Seconds of each of ``count`` calls call(start), call(start+1), ...

        On a GPU, back-to-back calls between CUDA events (as the layers of a
        forward run), unless ``wall``: then wall-clock around each call,
        which synchronises itself (a whole step).
        """
        if not self.gpu or wall:
            clock = self.clock
            out = []
            for i in range(start, start + count):
                t0 = clock()
                call(i)
                out.append(clock() - t0)
            return out
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(count)]
        for i, (a, b) in zip(range(start, start + count), events):
            a.record()
            call(i)
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in events]

    def _warm(self, call: Call, wall: bool) -> None:
        """Up to ``warmup`` calls, fewer for a call that takes over a quarter second."""
        t0 = time.perf_counter()
        for i in range(self.s.warmup):
            self._run(call, i, 1, wall)
            self.sync()
            if time.perf_counter() - t0 > 0.25:
                break

    def measure_rounds(self, factories: list[Factory], wall: bool | list[bool] = False,
                       progress: Log | None = None) -> list[list[list[float]]]:
        """Seconds of repeated calls of each case, per round: [case][round][sample].

        Round r times every case in turn, so a slow spell of the machine falls
        on a few samples of every case. The first round sizes the repeats per
        round from the case's first timed call and ``point_budget_s``. On a
        CPU every case's operands stay allocated for all rounds (making them
        again is slow); on a GPU they are made afresh in each round so that
        large caches need not all fit at once.
        """
        s = self.s
        walls = wall if isinstance(wall, list) else [wall] * len(factories)
        keep = not self.gpu
        calls = [f() for f in factories] if keep else []
        samples: list[list[list[float]]] = [[] for _ in factories]
        t0 = time.perf_counter()
        per_round: list[int] = [0] * len(factories)
        i = s.warmup
        with torch.inference_mode():
            for r in range(s.rounds):
                for j, factory in enumerate(factories):
                    call = calls[j] if keep else factory()
                    wall = walls[j]
                    if r == 0 or not keep:
                        self._warm(call, wall)
                    if r == 0:
                        first = self._run(call, i, 1, wall)
                        want = s.point_budget_s / s.rounds / max(first[0], 1e-7)
                        per_round[j] = max(s.min_per_round, min(s.max_per_round, int(want)))
                        count = per_round[j] - 1
                    else:
                        first, count = [], per_round[j]
                    samples[j].append(first + (self._run(call, i + 1, count, wall)
                                               if count > 0 else []))
                    i += count + 1
                    if not keep:
                        del call
                if progress is not None:
                    progress(f"  round {r + 1}/{s.rounds}: {len(factories)} cases "
                             f"({time.perf_counter() - t0:.0f} s)")
        del calls
        return samples

    def measure(self, factories: list[Factory], wall: bool | list[bool] = False,
                progress: Log | None = None) -> list[float]:
        """Median seconds of each case over all its samples (``measure_rounds``)."""
        return [statistics.median(x for rnd in case for x in rnd)
                for case in self.measure_rounds(factories, wall, progress)]


def _copies(bytes_per_copy: int, settings: Settings, most: int) -> int:
    """How many copies of an operand to cycle through so that calls miss the caches."""
    need = math.ceil(settings.flush_bytes / max(bytes_per_copy, 1))
    room = max(1, settings.memory_cap_bytes // max(bytes_per_copy, 1))
    return max(1, min(need, room, most))


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
    n_copies = _copies(probe.nbytes(), s, shard.model.num_layers)
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
        n_copies = _copies(cache_bytes, s, shard.model.num_layers)
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
    n_copies = _copies(probe.numel() * probe.element_size(), s, 4)
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
    import json

    import torch.distributed as dist
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
    import json
    import socket
    import tempfile

    import torch.multiprocessing as mp
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


# -- whole forwards ---------------------------------------------------------------------------
@dataclass
class Forward:
    kind: str                # "prefill" (one sequence, no context) or "decode"
    num_tokens: int
    num_seqs: int
    prefill_attn_work: float
    decode_kv_tokens: float
    seconds: float = 0.0

    @property
    def context(self) -> int:
        """Cached tokens before the new one of each decoding sequence."""
        return int(round(self.decode_kv_tokens / self.num_seqs)) - 1

    def as_dict(self) -> dict:
        return {"kind": self.kind, "num_tokens": self.num_tokens, "num_seqs": self.num_seqs,
                "prefill_attn_work": self.prefill_attn_work,
                "decode_kv_tokens": self.decode_kv_tokens, "seconds": self.seconds}


def prefill_shape(n: int) -> Forward:
    """One sequence's prompt of ``n`` tokens, nothing cached."""
    return Forward("prefill", n, 1, n * (n / 2.0), 0.0)


def decode_shape(batch: int, context: int) -> Forward:
    """One new token for each of ``batch`` sequences with ``context`` cached tokens."""
    return Forward("decode", batch, batch, 0.0, float(batch * (context + 1)))


def forward_layers(shard: ShardShape, s: Settings) -> int:
    """Layers of the whole model to build: all of them, unless memory says fewer."""
    per_layer = shard.layer_params() * s.torch_dtype.itemsize
    cap = (40 << 30) if s.device == "cuda" else (2 << 30)
    return max(1, min(shard.model.num_layers, cap // max(per_layer, 1)))


def forward_factory(model: M.LlamaLike, f: Forward, timer: Timer, seed: int = 0) -> Factory:
    """A whole forward of shape ``f`` (timed with ``wall=True``).

    Each forward ends with a device synchronisation, as an engine's step
    does when it samples.
    """
    def make() -> Call:
        gen = torch.Generator().manual_seed(seed)
        vocab = model.shard.vocab
        if f.kind == "prefill":
            tokens = torch.randint(vocab, (f.num_tokens,), generator=gen).to(model.device)
            cache = model.new_cache(1, f.num_tokens)

            def call(i: int):
                model.prefill(tokens, 0, cache)
                timer.sync()
        else:
            context = f.context
            tokens = torch.randint(vocab, (f.num_seqs,), generator=gen).to(model.device)
            cache = model.new_cache(f.num_seqs, context + 1)

            def call(i: int):
                model.decode(tokens, context, cache)
                timer.sync()
        return call
    return make


def forward_cases(model: M.LlamaLike, shapes: list[Forward], timer: Timer,
                  seed: int = 0) -> list[Case]:
    return [Case("forward", f.num_tokens, {"shape": f}, forward_factory(model, f, timer, seed),
                 wall=True) for f in shapes]


def forwards_from(cases: list[Case], seconds: list[float]) -> list[Forward]:
    out = []
    for c, t in zip(cases, seconds):
        if c.term == "forward":
            f = c.meta["shape"]
            out.append(Forward(f.kind, f.num_tokens, f.num_seqs, f.prefill_attn_work,
                               f.decode_kv_tokens, t))
    return out


def time_forwards(model: M.LlamaLike, shapes: list[Forward], timer: Timer,
                  seed: int = 0) -> list[Forward]:
    """Median seconds of whole forwards of ``model`` for each shape."""
    cases = forward_cases(model, shapes, timer, seed)
    return forwards_from(cases, measure_cases(cases, timer))
