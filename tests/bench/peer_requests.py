"""The request lists of the peer comparison (tests/bench/test_bench_peers.py): Poisson
arrivals with prompt and output lengths drawn, as pairs, from the Azure LLM inference
trace 2023's conversation service (scenarios/traces/azure-2023-conv.csv.gz, CC BY 4.0,
Microsoft Azure; see scenarios/traces/README.md), keeping only the pairs that fit
Llama-2-70B's 4,096-token context (91.7% of the trace's rows).

The shipped list (scenarios/traces/peer-conv-40000.csv.gz, read by
scenarios/bench-peer.yaml) is ``python tests/bench/peer_requests.py``'s; the bench makes
the other sizes the same way at the same rate per replica. Only numpy and the standard
library: the peer's own environment reads the same files with :func:`read_requests`.
"""
from __future__ import annotations

import csv
import gzip
import io
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
AZURE_CONV = ROOT / "scenarios" / "traces" / "azure-2023-conv.csv.gz"
SHIPPED = ROOT / "scenarios" / "traces" / "peer-conv-40000.csv.gz"
CONTEXT_TOKENS = 4096          # Llama-2-70B's max_model_len: prompt + output must fit
RATE_PER_REPLICA_PER_S = 0.7   # each A100 TP2 replica of Llama-2-70B busy, not overloaded
SHIPPED_REPLICAS = 16
SHIPPED_REQUESTS = 40_000
SEED = 47


def trace_lengths(path: pathlib.Path = AZURE_CONV) -> np.ndarray:
    """The trace's (prompt, output) token pairs that fit the context, shape (n, 2)."""
    with gzip.open(path, "rt", newline="") as fh:
        rows = csv.reader(fh)
        header = next(rows)
        i_prompt, i_output = header.index("ContextTokens"), header.index("GeneratedTokens")
        pairs = np.array([(int(r[i_prompt]), int(r[i_output])) for r in rows], dtype=np.int64)
    return pairs[pairs.sum(axis=1) <= CONTEXT_TOKENS]


def make_requests(num_requests: int, rate_per_s: float, seed: int = SEED) -> np.ndarray:
    """``num_requests`` rows of (arrival s, prompt tokens, output tokens): exponential gaps
    at ``rate_per_s`` from 0, lengths resampled as pairs from the trace."""
    rng = np.random.default_rng(seed)
    pairs = trace_lengths()
    gaps_s = rng.exponential(1.0 / rate_per_s, num_requests)
    arrival_s = np.cumsum(gaps_s) - gaps_s[0]
    picked = pairs[rng.integers(0, len(pairs), num_requests)]
    return np.column_stack([arrival_s, picked[:, 0], picked[:, 1]])


def write_requests(rows: np.ndarray, path: pathlib.Path) -> None:
    """A gzip CSV of fleetsim's trace layout (timestamp in s, prompt_tokens,
    output_tokens); the same rows give the same bytes (no time or name in the gzip header)."""
    text = io.StringIO()
    text.write("timestamp,prompt_tokens,output_tokens\n")
    for t, p, o in rows:
        text.write(f"{t:.6f},{int(p)},{int(o)}\n")
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as fh:
        fh.write(text.getvalue().encode())


def read_requests(path: pathlib.Path) -> list[tuple[float, int, int]]:
    """The rows of a list written by :func:`write_requests`, as the file gives them."""
    with gzip.open(path, "rt", newline="") as fh:
        rows = csv.reader(fh)
        next(rows)
        return [(float(t), int(p), int(o)) for t, p, o in rows]


def list_for(replicas: int, num_requests: int, path: pathlib.Path) -> pathlib.Path:
    """Write the list for ``replicas`` at the shipped rate per replica to ``path``."""
    write_requests(make_requests(num_requests, RATE_PER_REPLICA_PER_S * replicas), path)
    return path


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else SHIPPED
    list_for(SHIPPED_REPLICAS, SHIPPED_REQUESTS, out)
    print(f"wrote {out}")
