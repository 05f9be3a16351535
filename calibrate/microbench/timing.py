"""Timing on the device: the benchmark settings, the machine's set-up (threads,
numerics, allocation) and the timer that runs interleaved rounds of calls.

Timing: warm-up calls, then repeated calls, and the median of all of them.
The repeats of one term are taken in several interleaved rounds over all
its sizes, so that a slow spell of a shared machine lands on a few samples
of every size rather than on all samples of a few. Each call uses the next
of several copies of the weights or caches (``copies``) so that, as in a real
forward that walks every layer, a call does not find its operands in cache.
CPU timings use a fixed ``torch.set_num_threads``; GPU timings CUDA events.
"""
from __future__ import annotations

import ctypes
import math
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from calibrate.microbench import model as M

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


def copies(bytes_per_copy: int, settings: Settings, most: int) -> int:
    """How many copies of an operand to cycle through so that calls miss the caches."""
    need = math.ceil(settings.flush_bytes / max(bytes_per_copy, 1))
    room = max(1, settings.memory_cap_bytes // max(bytes_per_copy, 1))
    return max(1, min(need, room, most))
