"""What a serving engine adds to the model's step time, fitted on its own steps.

The calibrated profile (``fleetsim calibrate``) times the model's layers in
plain torch. A real engine spends more per step: it schedules, builds the
batch's index tensors, samples, and, in transformers' continuous batching on
CPU, computes attention over the whole packed batch at once (every new token
against every key of every sequence, with a mask), so attention grows with
new tokens × keys read rather than per sequence.

``fit_continuous`` runs the engine on a fixed grid of synthetic batches
(B prompts of C tokens submitted together, single long prompts, and a
staggered ramp that mixes prefill chunks with decodes), logs every step's
shape and duration, and fits the seconds left over by the profile's terms as

    extra = constant + per_seq · seqs + per_kv_token · keys          (steps of several new tokens)
                                       + per_kv_token_one_query · keys (a step of one new token)
          + per_kv_pair · new_tokens · keys

(transformers' SDPA path copies the grouped K/V heads out for every key when a
step has several new tokens, and packs the query heads instead when it has
one, so a key costs much less in a lone decode)

(non-negative least squares on relative error), where ``keys`` = Σ over the
batch's sequences of context + new tokens. Every fourth run is held back from
a first fit to report the error on steps the fit has not seen. The grid never
depends on the workloads being validated.

``fit_sequential`` does the same for ``model.generate`` one request at a time
(prefill, then one decode per token; stamps from a streamer).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from calibrate.engine import (ContinuousEngine, ContinuousLimits, EngineRequest, EngineStep,
                              SequentialEngine)
from calibrate.fit import error_summary, evaluate, nnls_small

ENGINE_TERMS = ("constant_s", "per_seq_s", "per_kv_token_s", "per_kv_token_one_query_s",
                "per_kv_pair_s")


@dataclass
class StepRows:
    """Shape columns and measured seconds of engine steps (one row per step)."""

    num_tokens: np.ndarray
    num_seqs: np.ndarray
    prefill_attn_work: np.ndarray
    decode_kv_tokens: np.ndarray
    kv_read_tokens: np.ndarray
    seconds: np.ndarray
    group: np.ndarray           # which calibration run a step came from

    def __len__(self) -> int:
        return len(self.seconds)

    @staticmethod
    def from_steps(steps: list[tuple[int, EngineStep]]) -> "StepRows":
        cols: dict[str, list[float]] = {k: [] for k in (
            "num_tokens", "num_seqs", "prefill_attn_work", "decode_kv_tokens", "kv_read_tokens",
            "seconds", "group")}
        for group, step in steps:
            seqs = step.seqs
            cols["num_tokens"].append(sum(q for q, _ in seqs))
            cols["num_seqs"].append(len(seqs))
            cols["prefill_attn_work"].append(sum(q * (c + q / 2.0) for q, c in seqs if q > 1))
            cols["decode_kv_tokens"].append(sum(c + 1 for q, c in seqs if q == 1))
            cols["kv_read_tokens"].append(sum(c + q for q, c in seqs))
            cols["seconds"].append(step.seconds)
            cols["group"].append(group)
        return StepRows(**{k: np.array(v, dtype=np.float64) for k, v in cols.items()})

    def subset(self, mask: np.ndarray) -> "StepRows":
        return StepRows(**{k: getattr(self, k)[mask] for k in self.__dataclass_fields__})


def profile_seconds(profile: dict, rows: StepRows) -> np.ndarray:
    """The profile's own step time (its terms and overhead) for each row, whole model."""
    tables = profile["tables"]
    layers = int(profile["model"]["num_layers"])
    over = profile.get("overhead") or {}
    per_layer = (evaluate(tables["dense"], rows.num_tokens)
                 + evaluate(tables["attn_prefill"], rows.prefill_attn_work)
                 + evaluate(tables["attn_decode"], rows.decode_kv_tokens))
    return (float(over.get("constant_s", 0.0)) + float(over.get("per_seq_s", 0.0)) * rows.num_seqs
            + layers * per_layer + evaluate(tables["lm_head"], rows.num_seqs))


def _design(rows: StepRows) -> np.ndarray:
    one = rows.num_tokens == 1
    return np.column_stack([np.ones(len(rows)), rows.num_seqs,
                            np.where(one, 0.0, rows.kv_read_tokens),
                            np.where(one, rows.kv_read_tokens, 0.0),
                            rows.num_tokens * rows.kv_read_tokens])


def engine_seconds(engine: dict, rows: StepRows) -> np.ndarray:
    coef = np.array([float(engine.get(k, 0.0)) for k in ENGINE_TERMS])
    return _design(rows) @ coef


def fit_extra(profile: dict, rows: StepRows) -> dict:
    """Engine terms (seconds) fitted to the steps' time beyond the profile's prediction."""
    base = profile_seconds(profile, rows)
    weight = 1.0 / rows.seconds                      # relative error
    coef = nnls_small(_design(rows) * weight[:, None], (rows.seconds - base) * weight)
    return {k: float(f"{max(float(c), 0.0):.4g}") for k, c in zip(ENGINE_TERMS, coef)}


def step_errors(profile: dict, engine: dict | None, rows: StepRows) -> np.ndarray:
    """Relative error (predicted − measured) / measured of each step."""
    pred = profile_seconds(profile, rows)
    if engine:
        pred = pred + engine_seconds(engine, rows)
    return (pred - rows.seconds) / rows.seconds


@dataclass
class EngineFit:
    engine: dict                 # the profile's ``engine`` block
    rows: StepRows
    held_back: dict              # error summary on the held-back runs' steps
    all_steps: dict              # error summary of the final fit on every step
    without_engine: dict         # the plain profile's error on every step


def fit_rows(profile: dict, rows: StepRows, holdback: int = 4) -> EngineFit:
    held = (rows.group % holdback) == (holdback - 1)
    first = fit_extra(profile, rows.subset(~held))
    held_rows = rows.subset(held)
    held_err = step_errors(profile, first, held_rows)
    engine = fit_extra(profile, rows)
    all_err = step_errors(profile, engine, rows)
    plain_err = step_errors(profile, None, rows)

    def summary(err: np.ndarray) -> dict:
        return error_summary([(1.0, 1.0 + e) for e in err])

    return EngineFit(engine=engine, rows=rows, held_back=summary(held_err),
                     all_steps=summary(all_err), without_engine=summary(plain_err))


def continuous_grid(limits: ContinuousLimits, quick: bool = False
                    ) -> list[list[EngineRequest]]:
    """The calibration runs: batches of equal prompts, long single prompts, a ramp."""
    capacity = limits.num_blocks * limits.page_size
    max_batch = limits.max_requests_per_batch
    out_tokens = 6
    runs: list[list[EngineRequest]] = []
    contexts = (32, 160, 640) if not quick else (32, 256)
    batches = (1, 2, 4, 8, 16, 32) if not quick else (1, 4, 16)
    for context in contexts:
        for batch in batches:
            if batch > max_batch or batch * context > 4096 or \
                    batch * (context + out_tokens + limits.page_size) > capacity:
                continue
            runs.append([EngineRequest(0.0, context, out_tokens)] * batch)
    for prompt in ((1024, 2048) if not quick else (1024,)):
        if prompt + limits.page_size < capacity:
            runs.append([EngineRequest(0.0, prompt, 3)])
    gap_s = 0.06
    for prompt, n in (((96, 12), (384, 8)) if not quick else ((128, 6),)):
        if n * (prompt + 24 + limits.page_size) <= capacity:
            runs.append([EngineRequest(i * gap_s, prompt, 24) for i in range(min(n, max_batch))])
    return runs


def fit_continuous(profile: dict, shape, limits: ContinuousLimits, threads: int = 1,
                   quick: bool = False, log=print) -> EngineFit:
    engine = ContinuousEngine(shape, limits, threads=threads)
    steps: list[tuple[int, EngineStep]] = []
    runs = continuous_grid(limits, quick)
    for i, run in enumerate(runs):
        engine.run(run)
        steps.extend((i, s) for s in engine.steps)
    fit = fit_rows(profile, StepRows.from_steps(steps))
    log(f"engine fit: {len(runs)} calibration runs, {len(fit.rows)} steps; held-back step error "
        f"median {100 * fit.held_back['median']:.1f}%, max {100 * fit.held_back['max']:.1f}% "
        f"(the plain profile: median {100 * fit.without_engine['median']:.1f}%)")
    return fit


def fit_sequential(profile: dict, shape, threads: int = 1, quick: bool = False,
                   log=print) -> EngineFit:
    """``model.generate``: each request's prefill then its decodes, one at a time."""
    engine = SequentialEngine(shape, threads=threads)
    engine.generate([1] * 8, 2)                       # warm-up
    rng = np.random.default_rng(0)
    steps: list[tuple[int, EngineStep]] = []
    # mixed order, so that the held-back requests (every fourth) fall inside the range
    prompts = (16, 1024, 64, 512, 256, 128, 768, 32) if not quick else (16, 512, 128, 64)
    out_tokens = 12
    for i, prompt in enumerate(prompts):
        ids = rng.integers(1, shape.vocab_size, prompt).tolist()
        start = time.perf_counter()
        times = engine.generate(ids, out_tokens)
        ends = [start] + times
        for j in range(len(times)):
            seqs = ((prompt, 0),) if j == 0 else ((1, prompt + j - 1),)
            steps.append((i, EngineStep(ends[j], ends[j + 1], seqs)))
    fit = fit_rows(profile, StepRows.from_steps(steps))
    log(f"generate() fit: {len(prompts)} calibration requests, {len(fit.rows)} steps; "
        f"held-back step error median {100 * fit.held_back['median']:.1f}%, max "
        f"{100 * fit.held_back['max']:.1f}% (the plain profile: median "
        f"{100 * fit.without_engine['median']:.1f}%)")
    return fit
