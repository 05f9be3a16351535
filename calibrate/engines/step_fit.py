"""What a serving engine adds to the model's step time, fitted on its own steps.

The calibrated profile (``fleetsim calibrate``) times the model's layers in
plain torch. A real engine spends more per step: it schedules, builds the
batch's index tensors, samples, and, in transformers' continuous batching on
CPU, computes attention over the whole packed batch at once (every new token
against every key of every sequence, with a mask), so attention grows with
new tokens × keys read rather than per sequence.

``continuous_steps`` runs the engine on a fixed grid of synthetic batches
(B prompts of C tokens submitted together, single long prompts, and a
staggered ramp that mixes prefill chunks with decodes), logs every step's
shape and duration, and fits the seconds left over by the profile's terms as

    seconds = model_scale · profile + constant + per_seq · seqs
            + per_prefill_step · [the step computes prompt tokens]
            + after_idle · [the engine sat idle IDLE_AFTER_S before the step]
            + keys · per_key(new_tokens)

where ``keys`` = Σ over the batch's sequences of context + new tokens, and
``per_key`` is a table over the step's new tokens (knots at powers of two up
to the token budget, interpolated linearly in log new tokens): what one key
costs depends on how many queries meet it, and on the code path (transformers'
SDPA path packs the query heads for a lone decode, and copies the grouped K/V
heads out for every key when a step has several new tokens); knots no step
comes near are left out. For an engine that attends over the packed batch the
per-key table replaces the profile's per-sequence attention terms.
A step that follows an idle engine is slower on this machine (its caches have
gone cold: a 100-token prefill after a second idle took about 1.5 times its
time in a busy run), so every other calibration run starts after a pause of
0.5 or 2 s.
``profile`` is the profile's own step time and ``model_scale`` how much slower
the machine runs it now than when the profile was measured: a virtual machine's
speed on the same GEMMs changes from hour to hour (by a factor of two on the
development machine), and without the factor the engine terms, which cannot
scale the layers, would trade prefill error for decode error.

The fit is non-negative least squares on relative error. Every fourth run is
held back from a first fit to report the error on steps the fit has not seen.
The grid never depends on the workloads being validated.

``sequential_steps`` does the same for ``model.generate`` one request at a time
(prefill, then one decode per token; stamps from a streamer), with the per-key
table reduced to one knot: a cost per key and new token.

The validation passes over the grid several times, between replays of the
workload, and fits once on every pass: this machine's speed drifts by several
percent within a minute, and calibration runs spread over the same minutes as
the workload average the drift as the workload's replays do.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from calibrate.fitting.tables import error_summary, nnls, predict_steps
from calibrate.engines.records import ContinuousLimits, EngineRequest, EngineStep

from sim.cost.base import IDLE_AFTER_S
from sim.cost.profile_schema import ENGINE_MODEL_SCALE as MODEL_SCALE
from sim.cost.profile_schema import ENGINE_PER_KEY as PER_KEY
from sim.cost.profile_schema import ENGINE_REPLACES_ATTENTION as REPLACES_ATTENTION
from sim.cost.profile_schema import (ENGINE_SCALARS, TERMS, CalibratedProfile, EngineTerms,
                                     ProfileOverhead, parse_profile)

if TYPE_CHECKING:                      # the engines need torch; the fit does not
    from calibrate.engines.hf.engine import ContinuousEngine, SequentialEngine


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
    after_idle: np.ndarray      # 1 where the engine sat idle IDLE_AFTER_S before the step

    def __len__(self) -> int:
        return len(self.seconds)

    @staticmethod
    def from_steps(steps: list[tuple[int, EngineStep]]) -> "StepRows":
        cols: dict[str, list[float]] = {k: [] for k in (
            "num_tokens", "num_seqs", "prefill_attn_work", "decode_kv_tokens", "kv_read_tokens",
            "seconds", "group", "after_idle")}
        for group, step in steps:
            seqs = step.seqs                       # (new tokens, context, is prefill)
            cols["num_tokens"].append(sum(q for q, _, _ in seqs))
            cols["num_seqs"].append(len(seqs))
            cols["prefill_attn_work"].append(sum(q * (c + q / 2.0) for q, c, p in seqs if p))
            cols["decode_kv_tokens"].append(sum(c + 1 for q, c, p in seqs if not p))
            cols["kv_read_tokens"].append(sum(c + q for q, c, _ in seqs))
            cols["seconds"].append(step.seconds)
            cols["group"].append(group)
            cols["after_idle"].append(float(step.idle_before_s >= IDLE_AFTER_S))
        return StepRows(**{k: np.array(v, dtype=np.float64) for k, v in cols.items()})

    def subset(self, mask: np.ndarray) -> "StepRows":
        return StepRows(**{k: getattr(self, k)[mask] for k in self.__dataclass_fields__})


def profile_seconds(profile: dict | CalibratedProfile, rows: StepRows, attention: bool = True) -> np.ndarray:
    """The profile's own step time (its terms and overhead) for each row, whole model;
    without its per-sequence attention terms when ``attention`` is false (an engine that
    attends over the packed batch instead), as ``CalibratedCostModel`` reads them (through
    the profile's schema)."""
    prof = profile if isinstance(profile, CalibratedProfile) else \
        parse_profile(profile, "the calibrated profile")
    tables = {t: getattr(prof.tables, t) or [] for t in TERMS}
    layers = int(prof.model.num_layers)
    over = prof.overhead or ProfileOverhead()
    per_seq = float(over.per_seq_s)
    if not attention:        # the per-sequence part of decode attention sits in the overhead
        tables["attn_prefill"] = tables["attn_decode"] = []
        per_seq = max(per_seq - layers * float(over.attn_decode_per_seq_per_layer_s), 0.0)
    return predict_steps(tables, (float(over.constant_s), per_seq), layers,
                         rows.num_tokens, rows.num_seqs, rows.prefill_attn_work,
                         rows.decode_kv_tokens)


def knots_for(max_tokens: int) -> list[int]:
    """Powers of two from 1 to the first at or above ``max_tokens``."""
    knots = [1]
    while knots[-1] < max_tokens:
        knots.append(knots[-1] * 2)
    return knots


def hat_basis(new_tokens: np.ndarray, knots: list[int]) -> np.ndarray:
    """Columns φ_j(q): linear interpolation weights in log q between the knots; beyond
    the last knot the last column grows in proportion to q (every query meets each key)."""
    q = np.asarray(new_tokens, dtype=np.float64)
    lq, lk = np.log(np.maximum(q, 1.0)), np.log(np.asarray(knots, dtype=np.float64))
    out = np.zeros((len(q), len(knots)))
    for j in range(len(knots)):
        e = np.zeros(len(knots))
        e[j] = 1.0
        out[:, j] = np.interp(lq, lk, e)
    beyond = q > knots[-1]
    out[beyond, -1] = q[beyond] / knots[-1]
    return out


def _design(rows: StepRows, knots: list[int]) -> np.ndarray:
    return np.column_stack([np.ones(len(rows)), rows.num_seqs,
                            (rows.prefill_attn_work > 0).astype(np.float64), rows.after_idle,
                            rows.kv_read_tokens[:, None] * hat_basis(rows.num_tokens, knots)])


def engine_seconds(engine: dict, rows: StepRows) -> np.ndarray:
    """What an engine block (read through its schema) adds to each row's step."""
    terms = EngineTerms.model_validate(engine)
    table = terms.per_kv_token_s or [[1, 0.0]]
    knots = [int(q) for q, _ in table]
    coef = np.array([float(getattr(terms, k)) for k in ENGINE_SCALARS]
                    + [float(v) for _, v in table])
    return _design(rows, knots) @ coef


def fit_extra(profile: dict, rows: StepRows, knots: list[int], packed: bool) -> dict:
    """Engine terms (seconds) and the profile's scale fitted to the steps' times (the
    profile's dense, LM-head and overhead terms alone when the engine's attention is
    ``packed``: the per-key table then holds all of the attention)."""
    base = profile_seconds(profile, rows, attention=not packed)
    # knots no step comes near would be fitted to zero: leave them out
    support = hat_basis(rows.num_tokens, knots).max(axis=0) > 1e-9
    knots = [q for q, ok in zip(knots, support) if ok] or [1]
    weight = 1.0 / rows.seconds                      # relative error
    design = np.column_stack([base, _design(rows, knots)])
    coef = nnls(design * weight[:, None], rows.seconds * weight)
    if not coef[0] > 0:
        # the engine terms alone explain the steps: keep the profile as measured
        coef = np.concatenate([[1.0], nnls(design[:, 1:] * weight[:, None],
                                           (rows.seconds - base) * weight)])
    sig = lambda c: float(f"{max(float(c), 0.0):.4g}")
    out = {k: sig(c) for k, c in zip(ENGINE_SCALARS, coef[1:])}
    out[PER_KEY] = [[q, sig(c)] for q, c in zip(knots, coef[1 + len(ENGINE_SCALARS):])]
    out[REPLACES_ATTENTION] = packed
    out[MODEL_SCALE] = sig(coef[0])
    return out


def predicted_seconds(profile: dict, engine: dict | None, rows: StepRows) -> np.ndarray:
    """Each step's time as the simulator predicts it from the profile and its engine
    block (the plain profile when ``engine`` is None)."""
    if not engine:
        return profile_seconds(profile, rows)
    terms = EngineTerms.model_validate(engine)
    base = profile_seconds(profile, rows, attention=not terms.replaces_attention)
    return float(terms.model_scale) * base + engine_seconds(engine, rows)


def scaled_engine(engine: dict, factor: float) -> dict:
    """``engine`` for a machine ``factor`` times slower: every term of the prediction
    (the profile's scale, the scalars, the per-key table) times ``factor``, so that each
    step's predicted time is ``factor`` times its own."""
    sig = lambda c: float(f"{float(c) * factor:.4g}")
    out = dict(engine)
    out[MODEL_SCALE] = sig(engine.get(MODEL_SCALE, 1.0))
    for k in ENGINE_SCALARS:
        if k in engine:
            out[k] = sig(engine[k])
    out[PER_KEY] = [[q, sig(c)] for q, c in engine.get(PER_KEY) or []]
    return out


def step_errors(profile: dict, engine: dict | None, rows: StepRows) -> np.ndarray:
    """Relative error (predicted − measured) / measured of each step."""
    return (predicted_seconds(profile, engine, rows) - rows.seconds) / rows.seconds


@dataclass
class EngineFit:
    engine: dict                 # the profile's ``engine`` block
    rows: StepRows
    held_back: dict              # error summary on the held-back runs' steps
    all_steps: dict              # error summary of the final fit on every step
    without_engine: dict         # the plain profile's error on every step


def _pct(err: dict, key: str) -> str:
    return "n/a" if err[key] is None else f"{100 * err[key]:.1f}%"


def fit_rows(profile: dict, rows: StepRows, max_tokens: int, holdback: int = 4,
             packed: bool = False) -> EngineFit:
    if not len(rows):
        raise RuntimeError("the engine logged no steps to fit")
    held = (rows.group % holdback) == (holdback - 1)
    if not held.any() or held.all():
        held = np.arange(len(rows)) % holdback == holdback - 1
    knots = knots_for(max_tokens)
    first = fit_extra(profile, rows.subset(~held), knots, packed)
    held_rows = rows.subset(held)
    held_err = step_errors(profile, first, held_rows)
    engine = fit_extra(profile, rows, knots, packed)
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
    # long enough for decodes to settle: the first few after a prefill run slower
    out_tokens = 16
    runs: list[list[EngineRequest]] = []
    contexts = (32, 160, 640) if not quick else (32, 256)
    batches = (1, 2, 4, 8, 16, 32) if not quick else (1, 4, 16)
    fits = lambda batch, context: \
        batch * (context + out_tokens + limits.page_size) <= capacity
    for context in contexts:
        for batch in batches:
            # up to 8,192 prompt tokens a batch: full batches then decode over several
            # thousand keys, as a busy engine does
            if batch > max_batch or batch * context > 8192 or not fits(batch, context):
                continue
            runs.append([EngineRequest(0.0, context, out_tokens)] * batch)
    # a small KV cache: each batch size also with the longest prompts the cache holds (a
    # full cache is where such an engine runs, and its decode steps read the most keys)
    for batch in batches:
        longest = capacity // batch - out_tokens - limits.page_size
        if batch <= max_batch and longest >= contexts[0] and \
                any(not fits(batch, c) and batch * c <= 8192 for c in contexts):
            runs.append([EngineRequest(0.0, longest, out_tokens)] * batch)
    for prompt in ((1024, 2048) if not quick else (1024,)):
        if prompt + limits.page_size < capacity:
            runs.append([EngineRequest(0.0, prompt, 3)])
    gap_s = 0.06
    for prompt, n in (((96, 12), (384, 8)) if not quick else ((128, 6),)):
        if n * (prompt + 24 + limits.page_size) <= capacity:
            runs.append([EngineRequest(i * gap_s, prompt, 24) for i in range(min(n, max_batch))])
    return runs


# before every other calibration run, in turn: its first step follows an idle engine
# (a longer idle costs more; the pauses span the idle gaps of a lightly loaded engine)
IDLE_PAUSES_S = (0.5, 2.0)


def _pause(i: int) -> None:
    if i % 2:
        time.sleep(IDLE_PAUSES_S[(i // 2) % len(IDLE_PAUSES_S)])


def continuous_steps(engine: ContinuousEngine, limits: ContinuousLimits, quick: bool = False,
                     first_group: int = 0) -> list[tuple[int, EngineStep]]:
    """Serve the calibration grid on ``engine`` (started); each step tagged with its run
    (numbered from ``first_group``, so that several passes over the grid stay apart)."""
    steps: list[tuple[int, EngineStep]] = []
    for i, run in enumerate(continuous_grid(limits, quick)):
        _pause(i)
        engine.run(run)
        steps.extend((first_group + i, s) for s in engine.steps)
    return steps


def fit_continuous(profile: dict, limits: ContinuousLimits,
                   steps: list[tuple[int, EngineStep]], log=print,
                   packed: bool = True) -> EngineFit:
    """The engine terms fitted on calibration steps (``continuous_steps``, one pass or
    several). ``packed``: the engine attends over the whole packed batch at once
    (transformers' continuous batching on CPU); otherwise each sequence over its own
    keys (vLLM's paged attention), and the profile's attention tables stay."""
    fit = fit_rows(profile, StepRows.from_steps(steps), limits.max_batch_tokens,
                   packed=packed)
    runs = len({g for g, _ in steps})
    log(f"engine fit: {runs} calibration runs, {len(fit.rows)} steps; the profile's terms "
        f"x{fit.engine[MODEL_SCALE]:.3g} on this machine now; held-back step error "
        f"median {_pct(fit.held_back, 'median')}, max {_pct(fit.held_back, 'max')} "
        f"(the plain profile: median {_pct(fit.without_engine, 'median')})")
    return fit


SEQUENTIAL_OUT_TOKENS = 12


def sequential_prompts(quick: bool = False) -> tuple[int, ...]:
    # mixed order, so that the held-back requests (every fourth) fall inside the range
    return (16, 1024, 64, 512, 256, 128, 768, 32) if not quick else (16, 512, 128, 64)


def sequential_steps(engine: SequentialEngine, shape, quick: bool = False,
                     first_group: int = 0) -> list[tuple[int, EngineStep]]:
    """``model.generate`` on the calibration prompts: each request's prefill then its
    decodes, one at a time (stamps from a streamer)."""
    engine.generate([1] * 8, 2)                       # warm-up
    rng = np.random.default_rng(0)
    steps: list[tuple[int, EngineStep]] = []
    last_end = -np.inf
    for i, prompt in enumerate(sequential_prompts(quick)):
        ids = rng.integers(1, shape.vocab_size, prompt).tolist()
        _pause(i)
        start = time.perf_counter()
        times = engine.generate(ids, SEQUENTIAL_OUT_TOKENS)
        ends = [start] + times
        for j in range(len(times)):
            seqs = ((prompt, 0, True),) if j == 0 else ((1, prompt + j - 1, False),)
            idle = start - last_end if j == 0 else 0.0
            steps.append((first_group + i, EngineStep(ends[j], ends[j + 1], seqs, idle)))
        last_end = ends[-1]
    return steps


def fit_sequential(profile: dict, steps: list[tuple[int, EngineStep]], log=print) -> EngineFit:
    rows = StepRows.from_steps(steps)
    # one sequence per step and the profile's own attention: a per-key table over new
    # tokens would give each calibration prompt its own knot and leave the scale free;
    # one knot (a cost per key and new token) is all the held-back prompts support
    fit = fit_rows(profile, rows, 1)
    log(f"generate() fit: {len({g for g, _ in steps})} calibration requests, {len(fit.rows)} "
        f"steps; the profile's terms x{fit.engine[MODEL_SCALE]:.3g} on this machine now; held-back step error median {_pct(fit.held_back, 'median')}, max "
        f"{_pct(fit.held_back, 'max')} (the plain profile: median "
        f"{_pct(fit.without_engine, 'median')})")
    return fit
