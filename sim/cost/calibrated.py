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

The profile is declared in ``profile_schema.py`` (what calibrate/ writes, what this
reads), found and checked against the pool in ``profile_file.py``; its tables are read
as ``tables.py`` says. This module holds the config and the cost model: its vectorised,
scalar and fast-forward step sums (with a serving engine's terms).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from sim.config.common import FilePath
from sim.config.paths import data_dir
from sim.config.specs import HardwareSpec, ModelSpec
from sim.cost.base import CostModel, CostModelConfigBase, DecodeRun, step_sum
from sim.cost.profile_file import check_profile, load_profile, resolve_profile_path
from sim.cost.profile_schema import EngineTerms, ProfileOverhead
from sim.cost.table_steps import TableRunEnds
from sim.cost.tables import PerKeyTable, Table
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.cost.shape import ArrayLike, BatchShape, default_kv_read

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
            profile = check_profile(load_profile(path), model, pool.tp,
                                    f"calibrated profile {path}")
        except (OSError, ValueError) as exc:
            return [(loc, str(exc))]
        made_on = profile.device_name
        if (profile.source or {}).get("gpu") and made_on is not None and \
                made_on.lower() != str(pool.hardware).lower():
            # built from kernels measured on one GPU: its times are that GPU's
            return [(loc, f"calibrated profile {path} was built from kernels measured on "
                          f"{made_on}, but the pool's hardware is {pool.hardware}; use the "
                          f"profile under calibrated/gpu/{str(pool.hardware).lower()}/ or "
                          f"set hardware: {made_on}")]
        if _measures_engine(profile.engine) and not pool.scheduler.engine_terms_apply:
            return [(loc, f"calibrated profile {path} carries the terms of the engine "
                          f"'{profile.engine.name or '?'}', measured for the continuous and "
                          f"single schedulers; a {pool.scheduler.type} pool needs a profile "
                          "without them")]
        for made, field, wanted, remedy in (
                (profile.dtype, "weight_dtype", pool.weight_dtype,
                 f"calibrate with --dtype {pool.weight_dtype}"),
                (profile.kv_dtype, "kv_dtype", pool.kv_dtype,
                 f"use the profile built for {pool.kv_dtype}")):
            if made is not None and made != wanted:
                return [(loc, f"calibrated profile {path} was built for {field} {made}, but "
                              f"the pool's {field} is {wanted}; set {field}: {made} or "
                              f"{remedy}")]
        return []


def _measures_engine(engine: EngineTerms | None) -> bool:
    """The profile carries a serving engine's terms (an ``engine:`` block with any)."""
    return engine is not None and bool(engine.model_fields_set)


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
        self.profile = check_profile(load_profile(self.path), model, tp, where)
        tables = self.profile.tables
        engine = self.profile.engine or EngineTerms()
        self.measures_engine = _measures_engine(self.profile.engine)
        scale = float(engine.model_scale)

        def table(rows) -> Table:
            return Table([[x, float(t) * scale] for x, t in rows], where)

        self._dense = table(tables.dense)
        self._prefill = table(tables.attn_prefill)
        self._decode = table(tables.attn_decode)
        self._head = table(tables.lm_head)
        self._comm = table(tables.tp_comm) if tables.tp_comm else None
        over = self.profile.overhead or ProfileOverhead()
        self._const_s = scale * float(over.constant_s) + float(engine.constant_s)
        per_seq_s = float(over.per_seq_s)
        if engine.replaces_attention:
            self._prefill = self._decode = Table([[1.0, 0.0]], "no per-sequence attention")
            # the per-sequence part of decode attention was moved into the overhead
            moved = self.num_layers * float(over.attn_decode_per_seq_per_layer_s)
            per_seq_s = max(per_seq_s - moved, 0.0)
        self._per_seq_s = scale * per_seq_s + float(engine.per_seq_s)
        # a profile of GPU kernel tables names the host part of its overhead (fleetsim's
        # old defaults, beside decode attention's per-sequence GPU cost): an engine
        # preset's host time replaces it; a profile timed on this machine's own loop
        # keeps its overhead as measured
        self._host_named = over.host_per_seq_s is not None
        self._host_per_seq_s = (float(over.host_per_seq_s) if self._host_named
                                else self._per_seq_s)
        self._per_key = PerKeyTable(engine.per_kv_token_s, f"{where}: engine.per_kv_token_s")
        self._packed = self._per_key.active
        self._prefill_step_s = float(engine.per_prefill_step_s)
        self.after_idle_s = float(engine.after_idle_s)
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
            self._comm is None or not self.profile.tp_comm_measured)

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
