"""Time a prompt's tokenisation on this machine: the engine front end's cost per prompt
token (``profiles/engines.yaml``, ``front_end_per_prompt_token_s``).

A byte-level BPE tokenizer (Hugging Face ``tokenizers``, the library vLLM's and SGLang's
front ends call) is trained here on the project's own text (nothing is downloaded), then
prompts of 500 to 16,000 tokens are encoded one call at a time, as an API server does
per request, sizes interleaved and repeated; the fastest seconds per size (the least disturbed by other work) are fitted to
``constant + per_token x tokens``. The vocabulary is smaller than Llama 3's 128k: the
per-token cost of a BPE encoder grows with merges applied, not with vocabulary size.

    python -m calibrate tokenise-time [--vocab 32000] [--repeats 7]
"""
from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parents[2]
SIZES_TOKENS = (500, 1000, 2000, 4000, 8000, 16000)


def corpus() -> list[str]:
    """The project's own prose and code, line by line."""
    lines: list[str] = []
    for path in sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"),
                        *ROOT.glob("sim/**/*.py")]):
        lines.extend(path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line.strip()]


def fit(tokens: list[float], seconds: list[float]) -> tuple[float, float]:
    """(constant seconds, seconds per token) of a least-squares line through the points."""
    slope, constant = np.polyfit(np.asarray(tokens, float), np.asarray(seconds, float), 1)
    return float(constant), float(slope)


def command(args) -> int:
    """``python -m calibrate tokenise-time``: train, time and fit; print the table."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    lines = corpus()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=args.vocab,
                                                       show_progress=False))
    text = "\n".join(lines)
    chars_per_token = len(text) / len(tok.encode(text).ids)
    prompts = {}
    for n in SIZES_TOKENS:                               # a slice of about n tokens
        chars = int(n * chars_per_token)
        prompts[n] = (text * (-(-chars // len(text))))[:chars]
    timings: dict[int, list[float]] = {n: [] for n in SIZES_TOKENS}
    counts = {n: len(tok.encode(p).ids) for n, p in prompts.items()}
    for _ in range(args.repeats):
        for n in SIZES_TOKENS:                           # sizes interleaved: drift spreads
            start = time.perf_counter()
            tok.encode(prompts[n])
            timings[n].append(time.perf_counter() - start)
    # the fastest of the repeats: the encoder's own time, least disturbed by whatever
    # else runs on the machine (the median beside it shows how busy it was)
    fastest = {n: min(t) for n, t in timings.items()}
    medians = {n: statistics.median(t) for n, t in timings.items()}
    constant_s, per_token_s = fit([counts[n] for n in SIZES_TOKENS],
                                  [fastest[n] for n in SIZES_TOKENS])
    print(f"tokenizers {tokenizers.__version__}, vocabulary {tok.get_vocab_size()}, "
          f"{platform.processor() or platform.machine()}, one thread, "
          f"fastest of {args.repeats} per size")
    print("tokens   fastest ms   us/token   median ms   spread (max/min)")
    for n in SIZES_TOKENS:
        t = timings[n]
        print(f"{counts[n]:>6}   {fastest[n] * 1e3:>10.3f}   {fastest[n] / counts[n] * 1e6:>8.2f}"
              f"   {medians[n] * 1e3:>9.3f}   {max(t) / min(t):>6.2f}")
    print(f"fit: {constant_s * 1e3:.3f} ms + {per_token_s * 1e6:.3f} us/token")
    return 0

