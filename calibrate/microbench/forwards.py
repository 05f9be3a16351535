"""Whole forwards of the plain-torch model: prefill and decode shapes timed as one
step each, from which the profile's per-step overhead (what the terms leave out) is
fitted and against which ``make bench`` checks the profile."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from calibrate.microbench import model as M
from calibrate.microbench.bench import Case, measure_cases
from calibrate.fitting.shapes import ShardShape
from calibrate.microbench.timing import Call, Factory, Settings, Timer


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
