"""Calibrated cost model: step-time terms from tables measured on the device.

A profile (``profiles/calibrated/<device>/<model>.yaml``, written by
``fleetsim calibrate``) holds, for one model's layer shapes on one tensor-
parallel shard, a monotone table of [x, seconds] per term and a per-step
overhead (constant + per sequence). The terms are read by interpolation in
log-log space between neighbouring points; below the first point the first
point's time applies (zero work, zero time); past the last point time grows
in proportion to x (work). Layer terms are multiplied by the model's layer
count as in ``CostModel.step_time_s``.

A profile may also carry an ``engine`` block, measured by ``fleetsim
validate`` on a real serving engine's own steps: the seconds that engine adds
to the model's step (host-side scheduling and batch building, and an
attention that spans the whole packed batch, as transformers' continuous
batching computes it on CPU), as a constant, a cost per sequence, a cost per
step that computes prompt tokens (admitting a request, or ``generate()``
setting one up), a cost of a step that starts after the engine sat idle for
``IDLE_AFTER_S`` (its caches gone cold), and a cost per key read (Σ context +
new tokens over the batch) that depends on the step's new tokens: a table over new tokens, interpolated linearly in log new
tokens, growing in proportion to new tokens past its last point (each new
token meets every key). With ``replaces_attention: true`` that per-key cost
is all of the step's attention (the engine attends over the packed batch
instead of per sequence) and the profile's attention tables are not used.
``model_scale`` (fitted with the engine terms, 1 when absent) multiplies the
profile's measured terms and overhead: the machine's speed on the model's own
layers when the engine was measured, relative to when the profile was.

Work counters (FLOPs, bytes for MFU/MBU) and peak figures are the roofline's
analytic ones for the pool's hardware. An all-reduce table that was not
measured (one device visible at calibration) is replaced by the roofline's
interconnect estimate when tp > 1.

Why one module of about 450 lines: reading a profile, checking it against a pool, and
its vectorised, scalar and fast-forward step sums (with a serving engine's terms) are
one cost model; each part reads the same tables.
"""
from __future__ import annotations

import copy
import math
from bisect import bisect_right
from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import yaml
from pydantic import Field

from sim.config.common import FilePath
from sim.config.specs import HardwareSpec, ModelSpec
from sim.cost import libm
from sim.cost.base import CostModel, CostModelConfigBase, DecodeRun, step_sum
from sim.cost.table_steps import PowerPieces, TableRunEnds
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.cost.shape import ArrayLike, BatchShape, default_kv_read
from sim.config.inputs import MAX_DOC_BYTES, DataFiles, InputFileError, read_bytes, shown
from sim.config.paths import data_dir
from sim.config.yamlio import load_data

TERMS = ("dense", "attn_prefill", "attn_decode", "lm_head", "tp_comm")
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                "ffn_size", "vocab_size", "num_experts", "experts_per_token")
_MIN_SECONDS = 1e-9
# seconds per step and per sequence an engine adds; and what one key read costs it, by
# the step's new tokens: [[new tokens, seconds per key], ...] at increasing token counts
ENGINE_SCALARS = ("constant_s", "per_seq_s", "per_prefill_step_s", "after_idle_s")
ENGINE_PER_KEY = "per_kv_token_s"
ENGINE_REPLACES_ATTENTION = "replaces_attention"   # the per-key cost is all the attention
# how much slower (> 1) or faster the machine ran the profile's own terms when the engine
# was measured than when the profile was: every measured table and the overhead scale by it
ENGINE_MODEL_SCALE = "model_scale"


class CalibratedConfig(CostModelConfigBase):
    type: Literal["calibrated"] = "calibrated"
    profile: FilePath = Field(
        description="Calibrated profile YAML: a path relative to the scenario file, or to the "
                    "shipped profiles/ folder, e.g. calibrated/cpu/tiny-llama.yaml")
    one_model: ClassVar[bool] = True

    def profile_file(self) -> str | None:
        return self.profile

    def problems(self, pool, model, files) -> list[tuple[tuple, str]]:
        """The profile exists, reads, and was made for the pool's model, tp, dtypes and
        scheduler: (field under the pool, message) of each problem."""
        loc = ("cost_model", "profile")
        try:
            path = resolve_profile_path(self.profile, files)
            data = load_profile(path)
            check_profile(data, model, pool.tp, f"calibrated profile {path}")
        except (OSError, ValueError) as exc:
            return [(loc, str(exc))]
        made_on = data.get("device_name")
        source = data.get("source") if isinstance(data.get("source"), dict) else {}
        if source.get("gpu") and isinstance(made_on, str) and \
                made_on.lower() != str(pool.hardware).lower():
            # built from kernels measured on one GPU: its times are that GPU's
            return [(loc, f"calibrated profile {path} was built from kernels measured on "
                          f"{made_on}, but the pool's hardware is {pool.hardware}; use the "
                          f"profile under calibrated/gpu/{str(pool.hardware).lower()}/ or "
                          f"set hardware: {made_on}")]
        engine = data.get("engine") or {}
        if engine and not pool.scheduler.engine_terms_apply:
            return [(loc, f"calibrated profile {path} carries the terms of the engine "
                          f"'{engine.get('name', '?')}', measured for the continuous and "
                          f"single schedulers; a {pool.scheduler.type} pool needs a profile "
                          "without them")]
        for key, field, wanted, remedy in (
                ("dtype", "weight_dtype", pool.weight_dtype,
                 f"calibrate with --dtype {pool.weight_dtype}"),
                ("kv_dtype", "kv_dtype", pool.kv_dtype,
                 f"use the profile built for {pool.kv_dtype}")):
            made = data.get(key)
            if made is not None and not isinstance(made, str):
                return [(loc, f"calibrated profile {path}: {key} must be a dtype name such as "
                              f"{wanted}, got a {type(made).__name__}")]
            if made is not None and made != wanted:
                return [(loc, f"calibrated profile {path} was built for {field} {made}, but "
                              f"the pool's {field} is {wanted}; set {field}: {made} or "
                              f"{remedy}")]
        return []


class Table:
    """A monotone [x, seconds] table, read in log-log space (vectorised and scalar)."""

    __slots__ = ("xs", "ts", "_lx", "_lt", "_x_last", "_t_last", "_zero", "_pieces")

    def __init__(self, rows: list[list[float]], where: str = "table") -> None:
        if not rows:
            raise ValueError(f"{where} is empty")
        try:
            xs = [float(r[0]) for r in rows]
            ts = [float(r[1]) for r in rows]
        except (TypeError, IndexError, ValueError):
            raise ValueError(f"{where} must be a list of [x, seconds] pairs") from None
        if any(x <= 0 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"{where}: x must be positive and strictly increasing")
        if any(t < 0 or not math.isfinite(t) for t in ts) or any(b < a for a, b in zip(ts, ts[1:])):
            raise ValueError(f"{where}: seconds must be finite, non-negative and non-decreasing")
        self.xs = np.array(xs)
        self.ts = np.array(ts)
        self._zero = ts[-1] <= 0
        self._lx = [math.log(x) for x in xs]
        self._lt = [math.log(max(t, _MIN_SECONDS)) for t in ts]
        self._x_last = xs[-1]
        self._t_last = ts[-1]
        # the power laws it is read as (``pieces``): constant below the first point, then
        # between each two points, then in proportion to x past the last
        slopes = [(t1 - t0) / (x1 - x0) for x0, x1, t0, t1 in
                  zip(self._lx, self._lx[1:], self._lt, self._lt[1:])]
        self._pieces = (PowerPieces([0.0], [0.0]) if self._zero else
                        PowerPieces([0.0] + xs, [0.0] + slopes + [1.0]))

    def pieces(self) -> PowerPieces:
        """The power laws t ∝ x^s that ``scalar`` reads, where each starts: a decode run
        sums them in closed form (``table_steps.py``)."""
        return self._pieces

    def __call__(self, x: ArrayLike) -> ArrayLike:
        x = np.asarray(x, dtype=np.float64)
        if self._zero:
            return np.zeros_like(x)
        inside = libm.exp(np.interp(libm.log(np.clip(x, self.xs[0], self._x_last)),
                                    self._lx, self._lt))
        beyond = self._t_last * x / self._x_last
        return np.where(x > 0, np.where(x > self._x_last, beyond, inside), 0.0)

    def scalar(self, x: float) -> float:
        if x <= 0 or self._zero:
            return 0.0
        if x >= self._x_last:
            return self._t_last * x / self._x_last
        lx = math.log(x)
        i = bisect_right(self._lx, lx)
        if i == 0:
            return math.exp(self._lt[0])
        x0, x1 = self._lx[i - 1], self._lx[i]
        t0, t1 = self._lt[i - 1], self._lt[i]
        return math.exp(t0 + (t1 - t0) * (lx - x0) / (x1 - x0))


class PerKeyTable:
    """Seconds per key read by new tokens in the step: linear in log new tokens between
    the points, the first point's below them, in proportion to new tokens past the last."""

    __slots__ = ("_lq", "_s", "_q_last", "_s_last", "active")

    def __init__(self, rows, where: str) -> None:
        rows = rows or []
        ok = isinstance(rows, list) and all(
            isinstance(r, (list, tuple)) and len(r) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r)
            for r in rows)
        if not ok:
            raise ValueError(f"{where} must be a list of [new tokens, seconds per key] pairs")
        qs, ss = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
        if any(q < 1 for q in qs) or any(b <= a for a, b in zip(qs, qs[1:])):
            raise ValueError(f"{where}: new tokens must be >= 1 and strictly increasing")
        if any(v < 0 or not math.isfinite(v) for v in ss):
            raise ValueError(f"{where}: seconds per key must be finite and >= 0")
        self.active = any(v > 0 for v in ss)
        self._lq = [math.log(q) for q in qs] or [0.0]
        self._s = ss or [0.0]
        self._q_last = qs[-1] if qs else 1.0
        self._s_last = ss[-1] if ss else 0.0

    def scalar(self, new_tokens: float) -> float:
        if new_tokens > self._q_last:
            return self._s_last * new_tokens / self._q_last
        lq = math.log(max(new_tokens, 1.0))
        i = bisect_right(self._lq, lq)
        if i == 0:
            return self._s[0]
        if i == len(self._lq):
            return self._s[-1]
        x0, x1 = self._lq[i - 1], self._lq[i]
        return self._s[i - 1] + (self._s[i] - self._s[i - 1]) * (lq - x0) / (x1 - x0)

    def __call__(self, new_tokens: ArrayLike) -> ArrayLike:
        q = np.asarray(new_tokens, dtype=np.float64)
        inside = np.interp(libm.log(np.maximum(q, 1.0)), self._lq, self._s)
        return np.where(q > self._q_last, self._s_last * q / self._q_last, inside)


def resolve_profile_path(profile: str, base_dir: DataFiles | str | Path | None = None
                         ) -> Path:
    """The profile file: relative to ``base_dir`` (the scenario's folder), as given,
    or relative to the shipped ``profiles/`` folder; the first that exists where a
    :class:`~sim.config.inputs.DataFiles` allows. ValueError if none does."""
    files = base_dir if isinstance(base_dir, DataFiles) else None
    p = Path(profile).expanduser()
    candidates = [p] if p.is_absolute() else (
        ([files.locate(p) if files else Path(base_dir) / p] if base_dir is not None else [])
        + [p, data_dir("profiles") / p])
    refused: InputFileError | None = None
    for c in candidates:
        if c.is_file():
            try:
                return files.check(c) if files else c
            except InputFileError as exc:
                refused = refused or exc
    if refused is not None:
        raise ValueError(f"calibrated profile {refused}")
    tried = ", ".join(shown(c) for c in candidates)
    raise ValueError(f"calibrated profile '{profile}' not found (looked for {tried}); "
                     f"make one with `fleetsim calibrate`")


@lru_cache(maxsize=32)
def _read(path: str, mtime: float) -> dict:
    try:
        data = load_data(read_bytes(path, max_bytes=MAX_DOC_BYTES).decode("utf-8"))
    except InputFileError as exc:
        raise ValueError(str(exc)) from None
    except yaml.MarkedYAMLError as exc:      # its text quotes the file: give the line only
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ValueError(f"{path} is not valid YAML{where}") from None
    except yaml.YAMLError:
        raise ValueError(f"{path} is not valid YAML") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text file") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a calibrated profile") from None
    if not isinstance(data, dict) or "tables" not in data or "model" not in data:
        raise ValueError(f"{path} is not a calibrated profile (no 'tables' / 'model')")
    return data


def load_profile(path: str | Path) -> dict:
    path = Path(path)
    return _read(str(path.resolve()), path.stat().st_mtime)


def check_profile(data: dict, model: ModelSpec, tp: int, where: str) -> None:
    """ValueError unless the profile was made for ``model``'s shapes at ``tp`` and every
    table and term reads."""
    try:
        _check_profile(data, model, tp, where)
    except (TypeError, AttributeError, KeyError, OverflowError) as exc:
        raise ValueError(f"{where} is malformed ({type(exc).__name__}: {exc})") from None


def _whole(value, field: str, where: str) -> int:
    """A count the profile gives: a whole number (a float of one too), never true/false."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise ValueError(f"{where}: {field} must be a whole number, got "
                         f"{value!r}" if isinstance(value, (int, float)) else
                         f"{where}: {field} must be a whole number, got a "
                         f"{type(value).__name__}")
    return int(value)


PROFILE_VERSION = 1      # the layout of the profiles this fleetsim writes and reads


def _check_profile(data: dict, model: ModelSpec, tp: int, where: str) -> None:
    version = data.get("version", PROFILE_VERSION)
    if isinstance(version, bool) or version != PROFILE_VERSION:
        raise ValueError(f"{where}: version {version!r}: this fleetsim reads calibrated "
                         f"profiles of version {PROFILE_VERSION} (a profile written by "
                         "another fleetsim may mean other things by its tables): "
                         "calibrate it anew with this one")
    for block in ("model", "tables", "overhead", "engine"):
        if data.get(block) is not None and not isinstance(data[block], dict):
            raise ValueError(f"{where}: {block} must be a mapping")
    shape = data.get("model") or {}
    missing = [f for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads")
               if f not in shape]
    if missing:
        raise ValueError(f"{where}: the profile's model block lacks {', '.join(missing)}")
    diffs = [f"{f} {shape.get(f)} vs {getattr(model, f)}" for f in SHAPE_FIELDS
             if f in shape and _whole(shape[f], f"model.{f}", where) != int(getattr(model, f))]
    if diffs:
        raise ValueError(f"{where} was calibrated for model '{shape.get('name')}', whose shape "
                         f"differs from the pool's model '{model.name}' ({'; '.join(diffs)})")
    if _whole(data.get("tp", 1), "tp", where) != int(tp):
        raise ValueError(f"{where} was calibrated at tp={data.get('tp', 1)} but the pool runs "
                         f"tp={tp}; calibrate with `fleetsim calibrate --tp {tp}`")
    tables = data.get("tables") or {}
    absent = [t for t in TERMS if t != "tp_comm" and not tables.get(t)]
    if absent:
        raise ValueError(f"{where}: tables missing or empty: {', '.join(absent)}")
    for term in TERMS:
        if tables.get(term):
            Table(tables[term], f"{where}: tables.{term}")
    _check_seconds(data.get("overhead") or {}, ("constant_s", "per_seq_s"), f"{where}: overhead")
    engine = data.get("engine")
    if engine is not None:
        _check_seconds(engine, ENGINE_SCALARS, f"{where}: engine")
        PerKeyTable(engine.get(ENGINE_PER_KEY), f"{where}: engine.{ENGINE_PER_KEY}")
        scale = engine.get(ENGINE_MODEL_SCALE, 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0 \
                or not math.isfinite(scale):
            raise ValueError(f"{where}: engine.{ENGINE_MODEL_SCALE} must be a number > 0, "
                             f"got {scale!r}")
        if not isinstance(engine.get(ENGINE_REPLACES_ATTENTION, False), bool):
            raise ValueError(f"{where}: engine.{ENGINE_REPLACES_ATTENTION} must be true or "
                             f"false")


def _check_seconds(block: dict, keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        v = block.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{where}.{key} must be a number >= 0, got {v!r}")


class CalibratedCostModel(CostModel):
    decode_time_linear = False      # decode attention is a measured, non-linear table

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, tp: int, weight_dtype: str,
                 kv_dtype: str, cfg: CalibratedConfig,
                 base_dir: str | Path | None = None) -> None:
        self.cfg = cfg
        self.model = model
        self.tp = tp
        self.num_layers = model.num_layers
        self.path = resolve_profile_path(cfg.profile, base_dir)
        where = f"calibrated profile {self.path}"
        self.profile = load_profile(self.path)
        check_profile(self.profile, model, tp, where)
        tables = self.profile["tables"]
        engine = self.profile.get("engine") or {}
        self.measures_engine = bool(engine)
        scale = float(engine.get(ENGINE_MODEL_SCALE, 1.0))

        def table(term: str) -> Table:
            rows = [[x, float(t) * scale] for x, t in tables[term]]
            return Table(rows, f"{where}: tables.{term}")

        self._dense = table("dense")
        self._prefill = table("attn_prefill")
        self._decode = table("attn_decode")
        self._head = table("lm_head")
        self._comm = table("tp_comm") if tables.get("tp_comm") else None
        over = self.profile.get("overhead") or {}
        self._const_s = (scale * float(over.get("constant_s", 0.0))
                         + float(engine.get("constant_s", 0.0)))
        per_seq_s = float(over.get("per_seq_s", 0.0))
        if engine.get(ENGINE_REPLACES_ATTENTION, False):
            self._prefill = self._decode = Table([[1.0, 0.0]], "no per-sequence attention")
            # the per-sequence part of decode attention was moved into the overhead
            moved = self.num_layers * float(over.get("attn_decode_per_seq_per_layer_s", 0.0))
            per_seq_s = max(per_seq_s - moved, 0.0)
        self._per_seq_s = scale * per_seq_s + float(engine.get("per_seq_s", 0.0))
        # a profile of GPU kernel tables names the host part of its overhead (fleetsim's
        # old defaults, beside decode attention's per-sequence GPU cost): an engine
        # preset's host time replaces it; a profile timed on this machine's own loop
        # keeps its overhead as measured
        self._host_named = "host_per_seq_s" in over
        self._host_per_seq_s = (float(over["host_per_seq_s"]) if self._host_named
                                else self._per_seq_s)
        self._per_key = PerKeyTable(engine.get(ENGINE_PER_KEY),
                                    f"{where}: engine.{ENGINE_PER_KEY}")
        self._packed = self._per_key.active
        self._prefill_step_s = float(engine.get("per_prefill_step_s", 0.0))
        self.after_idle_s = float(engine.get("after_idle_s", 0.0))
        # work counters, peaks and (when not measured) the all-reduce come from the roofline
        self._roofline = RooflineCostModel(model, hardware, tp, weight_dtype, kv_dtype,
                                           RooflineConfig())
        self._decode_fixed_s: dict[int, float] = {}    # a decode step but its keys, by batch
        # a step's dense + all-reduce seconds by its new tokens, its LM head's by its rows:
        # at most as many as the scheduler's token budget and batch size allow
        self._by_tokens: dict[float, float] = {}
        self._by_seqs: dict[float, float] = {}
        # a decode run's terms but its keys, by batch size (``_decode_run_terms``)
        self._run_terms: dict[int, tuple[float, float, float, float, float | None]] = {}
        self._comm_from_roofline = tp > 1 and (
            self._comm is None or not self.profile.get("tp_comm_measured", False))

    @property
    def label(self) -> str:
        """'calibrated ' and the profile: under profiles/ when shipped, else as named."""
        shipped = data_dir("profiles").resolve()
        try:
            return f"calibrated profiles/{self.path.resolve().relative_to(shipped)}"
        except ValueError:
            return f"calibrated {self.cfg.profile}"

    # -- terms (seconds, one layer, one shard) -----------------------------------------
    def overhead_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self._const_s + self._per_seq_s * num_seqs

    def host_terms(self) -> tuple[float, float, bool]:
        """A profile of GPU kernel tables: its overhead's constant and ``host_per_seq_s``
        are host time, which an engine preset replaces (the tables time GPU work only).
        A profile timed on this machine (CPU) or on a whole engine keeps its own."""
        if self._host_terms is not None:
            return self._host_terms              # an engine's, in place of the profile's
        return self._const_s, self._host_per_seq_s, not self._host_named or self.measures_engine

    # an engine's host terms in place of the profile's, and whether that host time is
    # overlapped with the GPU step (``with_engine_host``)
    _host_terms: tuple[float, float, bool] | None = None
    _host_overlap = False
    _overlap_c_s = _overlap_per_seq_s = 0.0

    def with_engine_host(self, host_constant_s: float, host_per_seq_s: float,
                         overlap: bool) -> "CalibratedCostModel":
        """This model with an engine's host time per step in place of its own host terms
        (``sim/cost/engine_host.py`` says how each engine's is taken): added to the GPU
        step (a synchronous loop) or overlapped with it (a step lasts the longer of the
        two). Priced in the model's own step arithmetic, the simulator's hot path."""
        new = copy.copy(self)
        gpu_per_seq_s = self._per_seq_s - self._host_per_seq_s
        if overlap:
            new._const_s, new._per_seq_s = 0.0, gpu_per_seq_s
            new._host_overlap = True
            new._overlap_c_s, new._overlap_per_seq_s = host_constant_s, host_per_seq_s
        else:
            new._const_s, new._per_seq_s = host_constant_s, gpu_per_seq_s + host_per_seq_s
        new._host_terms = (host_constant_s, host_per_seq_s, True)
        new._decode_fixed_s = {}
        new._run_terms = {}
        return new

    def step_time_s(self, shape: BatchShape) -> ArrayLike:
        time_s = super().step_time_s(shape)
        if self._host_overlap:
            return np.maximum(time_s, self._overlap_c_s
                              + self._overlap_per_seq_s * np.asarray(shape.num_seqs))
        return time_s

    def dense_s(self, num_tokens: ArrayLike) -> ArrayLike:
        return self._dense(num_tokens)

    def attn_prefill_s(self, prefill_attn_work: ArrayLike) -> ArrayLike:
        return self._prefill(prefill_attn_work)

    def attn_decode_s(self, decode_kv_tokens: ArrayLike) -> ArrayLike:
        return self._decode(decode_kv_tokens)

    def tp_comm_s(self, num_tokens: ArrayLike) -> ArrayLike:
        if self._comm_from_roofline:
            return self._roofline.tp_comm_s(num_tokens)
        if self._comm is None or self.tp == 1:
            return np.zeros_like(np.asarray(num_tokens, dtype=np.float64))
        return self._comm(num_tokens)

    def lm_head_s(self, num_seqs: ArrayLike) -> ArrayLike:
        return self._head(num_seqs)

    def engine_s(self, shape: BatchShape) -> ArrayLike:
        out = np.where(np.asarray(shape.prefill_attn_work) > 0, self._prefill_step_s, 0.0)
        if self._packed:
            out = out + shape.kv_read() * self._per_key(shape.num_tokens)
        return out

    def engine_host_s(self, shape: BatchShape) -> ArrayLike:
        """The engine's host work: its per-prefill-step seconds. The per-key term is an
        attention kernel over the packed batch, GPU work spread over the layers."""
        return np.where(np.asarray(shape.prefill_attn_work) > 0, self._prefill_step_s, 0.0)

    # -- one step in plain floats (the hot path of the simulator) --------------------------
    def _comm_scalar(self, num_tokens: float) -> float:
        if self.tp == 1:
            return 0.0
        if self._comm_from_roofline:
            return float(self._roofline.tp_comm_s(num_tokens))
        return self._comm.scalar(num_tokens)

    def step_scalar(self, num_tokens: float, num_seqs: float, prefill_attn_work: float,
                    decode_kv_tokens: float, kv_read_tokens: float | None = None,
                    sequences: float | None = None) -> tuple[float, float, float]:
        engine = self._prefill_step_s if prefill_attn_work > 0 else 0.0
        if self._packed:
            kv = (float(default_kv_read(num_tokens, num_seqs, decode_kv_tokens))
                  if kv_read_tokens is None else kv_read_tokens)
            engine += kv * self._per_key.scalar(num_tokens)
        # the terms read by the step's new tokens (dense + all-reduce, added first as
        # ``step_sum`` adds them: the same bits) and by its rows, kept per count
        per_token = self._by_tokens.get(num_tokens)
        if per_token is None:
            per_token = self._by_tokens[num_tokens] = (self._dense.scalar(num_tokens)
                                                       + self._comm_scalar(num_tokens))
        head = self._by_seqs.get(num_seqs)
        if head is None:
            head = self._by_seqs[num_seqs] = self._head.scalar(num_seqs)
        time_s = step_sum(self._const_s + self._per_seq_s * num_seqs, self.num_layers,
                          per_token, 0.0,
                          self._prefill.scalar(prefill_attn_work) if prefill_attn_work > 0
                          else 0.0,
                          self._decode.scalar(decode_kv_tokens) if decode_kv_tokens > 0
                          else 0.0, head, engine)
        if self._host_overlap:
            host_s = self._overlap_c_s + self._overlap_per_seq_s * num_seqs
            if host_s > time_s:
                time_s = host_s
        flops, moved = self._roofline.work_scalar(num_tokens, num_seqs, prefill_attn_work,
                                                  decode_kv_tokens)
        return time_s, flops, moved

    def decode_run(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> DecodeRun:
        """A fast-forwarded decode run in closed form (``TableRunEnds``: the decode
        attention table summed piece by piece over the run), the steps as
        ``decode_run_s`` prices them; its FLOPs and bytes (linear in the keys read) from
        the roofline's closed form."""
        terms = self._run_terms.get(num_seqs)
        if terms is None:
            terms = self._run_terms[num_seqs] = self._decode_run_terms(num_seqs)
        fixed_s, layers, per_key_s, n, floor_s = terms
        ends = TableRunEnds(self._decode, fixed_s, layers, per_key_s, kv_tokens_first, n,
                            num_steps, floor_s)
        return DecodeRun(ends, ends.last_s, n,
                         *self._roofline.decode_work(num_seqs, kv_tokens_first))

    def _decode_run_terms(self, num_seqs: int) -> tuple[float, float, float, float, float | None]:
        """What a decode run of ``num_seqs`` sequences is built from besides its keys: its
        fixed seconds a step, the layers, an engine's cost per key, the sequences as a
        float and an overlapped host's floor (None without one)."""
        n = float(num_seqs)
        return (self._decode_fixed(num_seqs), float(self.num_layers),
                self._per_key.scalar(n) if self._packed else 0.0, n,
                self._overlap_c_s + self._overlap_per_seq_s * n if self._host_overlap else None)

    def decode_work(self, num_seqs: int, kv_tokens_first: float
                    ) -> tuple[float, float, float, float]:
        """The roofline's work counters (its closed form)."""
        return self._roofline.decode_work(num_seqs, kv_tokens_first)

    def _decode_fixed(self, num_seqs: int) -> float:
        """A decode step's seconds but its keys' (decode attention, an engine's per-key
        cost) and an overlapped host's: the same every step of a run, kept per batch size."""
        fixed = self._decode_fixed_s.get(num_seqs)
        if fixed is None:
            n = float(num_seqs)
            overlap, self._host_overlap = self._host_overlap, False    # the GPU step's
            try:
                fixed = self._decode_fixed_s[num_seqs] = self.step_scalar(n, n, 0.0, 0.0,
                                                                          0.0)[0]
            finally:
                self._host_overlap = overlap
        return fixed

    def decode_run_s(self, num_seqs: int, kv_tokens_first: float, num_steps: int) -> np.ndarray:
        """Times of a decode run's steps, each read from the tables (what ``decode_run``
        sums in closed form): every term but the keys read is the same each step, so it
        is priced once per batch size and only the decode attention (and an engine's
        per-key cost) is read per step, in one pass over the run."""
        fixed = self._decode_fixed(num_seqs)
        kv = kv_tokens_first + np.arange(num_steps, dtype=np.float64) * float(num_seqs)
        out = fixed + self.num_layers * self._decode(kv)
        if self._packed:
            out = out + kv * self._per_key.scalar(float(num_seqs))
        if self._host_overlap:
            host_s = self._overlap_c_s + self._overlap_per_seq_s * num_seqs
            if out[0] < host_s or out[-1] < out[0]:     # (a run's steps only grow) else hidden
                out = np.maximum(out, host_s)
        return out

    # -- work for MFU / MBU --------------------------------------------------------------
    def work(self, shape: BatchShape) -> tuple[ArrayLike, ArrayLike]:
        return self._roofline.work(shape)

    @property
    def peak_flops_per_gpu(self) -> float:
        return self._roofline.peak_flops_per_gpu

    @property
    def peak_bytes_per_s_per_gpu(self) -> float:
        return self._roofline.peak_bytes_per_s_per_gpu
