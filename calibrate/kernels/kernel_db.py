"""GPU kernels measured on real GPUs: NVIDIA AIConfigurator's database.

The PyPI package ``aiconfigurator-core`` (Apache-2.0) ships parquet tables of
kernels timed on real GPUs under vLLM, SGLang and TensorRT-LLM, laid out as
``aiconfigurator_core/systems/data/<gpu>/<family>/<engine>/<version>/``:

- ``gemm/.../gemm_perf.parquet``: ``gemm_dtype`` (bfloat16, fp8, ...), ``m``,
  ``n``, ``k``, ``latency``: one GEMM of an (m x k) by (k x n) product;
- ``attention/.../context_attention_perf.parquet``: prefill attention of
  ``batch_size`` sequences of ``isl`` tokens, by ``num_heads``,
  ``num_key_value_heads``, ``head_dim``, ``kv_cache_dtype``, ``window_size``;
- ``attention/.../generation_attention_perf.parquet``: one decode token for
  each of ``batch_size`` sequences holding ``isl + step`` keys;
- ``comm/<engine>/.../custom_allreduce_perf.parquet``: one all-reduce over
  ``num_gpus`` GPUs of ``message_size`` bf16 elements (not bytes);
- ``quantize/<engine>/.../computescale_perf.parquet``: ``m``, ``k``, ``latency``: what
  quantising an (m x k) bf16 activation to FP8 with a scale computed per token costs over
  quantising it with a fixed scale (two timings of vLLM's ``scaled_fp8_quant``, one less
  the other);
- ``moe/<engine>/.../moe_perf.parquet``: one layer's fused mixture-of-experts op
  (routing, both expert GEMMs and their activation) for ``num_tokens`` tokens
  (before routing), by ``hidden_size``, ``inter_size`` (one expert's full
  intermediate size), ``topk``, ``num_experts``, ``moe_dtype``, ``moe_tp_size``
  and ``moe_ep_size`` (each GPU holds ``num_experts / ep`` experts and
  ``inter_size / tp`` of each) and ``distribution``, how tokens are spread over
  the experts (``balanced``, or ``power_law_<alpha>``).

Every ``latency`` is milliseconds for one call (one layer's kernel). Each
table carries ``kernel_source``: several kernels may be timed for one shape
(FlashAttention 3 and FlashInfer on H100, say); one is chosen per table.

Only the installed package's files are read (pandas on parquet); nothing is
downloaded and the package's own code is not run.

Why one module of about 400 lines: every operation's table is found, loaded, filtered
and looked up the same way; split per operation, each part would repeat the loading.
"""
from __future__ import annotations

import importlib.util
from importlib.metadata import version
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fitting.tables import make_table_raw
from calibrate.kernels.curves import MS, GemmCurves, KernelDbError, MoeCurve, main_kernel

PACKAGE = "aiconfigurator_core"
INSTALL_HINT = "pip install 'fleetsim[kernels]' (the PyPI package aiconfigurator-core)"
# fleetsim hardware profile name -> the database's GPU folder
GPU_FOLDERS = {"H100-SXM": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm",
               "A100-80GB": "a100_sxm", "L40S": "l40s"}
ENGINES = ("vllm", "sglang", "trtllm")
GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}
KV_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}
# weight dtype -> the MoE tables' moe_dtype, first choice first: FP8 weights read per-tensor
# scaled rows (as the GEMMs), else block-scaled ones where a table has only those
MOE_DTYPES = {"bf16": ("bfloat16",), "fp16": ("float16",), "fp8": ("fp8", "fp8_block")}


def package_root(root: str | Path | None = None) -> Path:
    """The database's ``systems/data`` folder: under ``root`` when given (a copy or a
    test fixture laid out the same way), else in the installed package."""
    if root is not None:
        path = Path(root)
        if not path.is_dir():
            raise KernelDbError(f"kernel database folder {path} does not exist")
        return path
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise KernelDbError(f"the measured-kernel database is not installed; "
                            f"{INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    if not path.is_dir():
        raise KernelDbError(f"{PACKAGE} is installed but has no kernel tables at {path}")
    return path


def package_version() -> str | None:
    try:
        return version("aiconfigurator-core")
    except Exception:                     # noqa: BLE001 - a fixture has no package
        return None


def _version_key(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _choices(items) -> str:
    items = sorted(items)
    return ", ".join(items) if items else "none"


@dataclass
class KernelDb:
    """One GPU's tables for one engine: the newest version holding GEMMs and attention
    (or the one asked for), and the all-reduce tables of the same engine."""

    root: Path
    gpu: str                     # the database's folder name, e.g. h100_sxm
    engine: str
    version: str
    comm_version: str | None
    _cache: dict = field(default_factory=dict, repr=False)

    @staticmethod
    def open(hardware: str, engine: str, version: str | None = None,
             root: str | Path | None = None) -> "KernelDb":
        base = package_root(root)
        if hardware not in GPU_FOLDERS:
            raise KernelDbError(f"GPU '{hardware}': the kernel database covers "
                                f"{_choices(GPU_FOLDERS)}")
        gpu = GPU_FOLDERS[hardware]
        if not (base / gpu).is_dir():
            present = [h for h, f in GPU_FOLDERS.items() if (base / f).is_dir()]
            raise KernelDbError(f"GPU '{hardware}' ({gpu}) is not in this kernel database; "
                                f"it has {_choices(present)}")
        if engine not in ENGINES:
            raise KernelDbError(f"engine '{engine}': expected one of {', '.join(ENGINES)}")
        gemm = {p.name for p in (base / gpu / "gemm" / engine).glob("*") if p.is_dir()}
        attn = {p.name for p in (base / gpu / "attention" / engine).glob("*") if p.is_dir()}
        both = {v for v in gemm & attn
                if (base / gpu / "gemm" / engine / v / "gemm_perf.parquet").is_file()
                and (base / gpu / "attention" / engine / v
                     / "context_attention_perf.parquet").is_file()}
        if not both:
            engines = [e for e in ENGINES if (base / gpu / "gemm" / e).is_dir()]
            raise KernelDbError(f"the kernel database has no {engine} GEMM and attention "
                                f"tables for {hardware}; engines with tables there: "
                                f"{_choices(engines)}")
        if version is None:
            version = max(both, key=_version_key)
        elif version not in both:
            raise KernelDbError(f"{engine} {version} on {hardware}: the kernel database has "
                                f"versions {_choices(both)}")
        comm = [p.parent.name for p in (base / gpu / "comm" / engine).glob(
            "*/custom_allreduce_perf.parquet")]
        older = [v for v in comm if _version_key(v) <= _version_key(version)]
        comm_version = max(older or comm, key=_version_key) if comm else None
        return KernelDb(base, gpu, engine, version, comm_version)

    # -- tables ------------------------------------------------------------------------------
    def _table(self, family: str, name: str, version: str):
        key = (family, name, version)
        if key not in self._cache:
            path = self.root / self.gpu / family / self.engine / version / name
            try:
                self._cache[key] = pd.read_parquet(path)
            except (OSError, ValueError) as exc:
                raise KernelDbError(f"cannot read {path}: {exc}") from None
        return self._cache[key]

    def provenance(self) -> dict:
        return {"database": "AIConfigurator measured kernels (aiconfigurator-core, "
                            "NVIDIA, Apache-2.0)",
                "package_version": package_version(), "gpu": self.gpu, "engine": self.engine,
                "engine_version": self.version, "allreduce_version": self.comm_version}

    def gemm_curves(self, dtype: str) -> GemmCurves:
        if dtype not in GEMM_DTYPES:
            raise KernelDbError(f"weight dtype '{dtype}': the kernel database times GEMMs in "
                                f"{_choices(GEMM_DTYPES)}")
        df = self._table("gemm", "gemm_perf.parquet", self.version)
        rows = df[df["gemm_dtype"] == GEMM_DTYPES[dtype]]
        if rows.empty:
            raise KernelDbError(f"{self.gpu} {self.engine} {self.version}: no "
                                f"{GEMM_DTYPES[dtype]} GEMMs; it has "
                                f"{_choices(set(df['gemm_dtype']))}")
        return GemmCurves.from_rows(rows)

    def attention(self, phase: str, heads: int, kv_heads: int, head_dim: int,
                  kv_dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """(batch, keys per sequence, seconds, kernel) of one layer's attention for one
        shard's heads: ``phase`` 'context' (keys = the prompt) or 'generation' (keys =
        isl + step, one new token each)."""
        name = f"{phase}_attention_perf.parquet"
        df = self._table("attention", name, self.version)
        if kv_dtype not in KV_DTYPES:
            raise KernelDbError(f"kv dtype '{kv_dtype}': expected one of {_choices(KV_DTYPES)}")
        sel = ((df["num_heads"] == heads) & (df["head_dim"] == head_dim)
               & (df["kv_cache_dtype"] == KV_DTYPES[kv_dtype]))
        if "window_size" in df:
            sel &= df["window_size"] == 0
        # MHA rows may give 0 KV heads for "as many as the query heads"
        kv_ok = df["num_key_value_heads"] == kv_heads
        if kv_heads == heads:
            kv_ok |= df["num_key_value_heads"] == 0
        rows = df[sel & kv_ok]
        if rows.empty:
            have = df[df["head_dim"] == head_dim][["num_heads", "num_key_value_heads"]]
            pairs = sorted({f"{a}/{b}" for a, b in have.itertuples(index=False)})
            raise KernelDbError(
                f"{self.gpu} {self.engine} {self.version}: no {phase} attention for "
                f"{heads} heads / {kv_heads} KV heads of {head_dim} in {kv_dtype} KV; "
                f"heads / KV heads timed at head_dim {head_dim}: {_choices(pairs)}")
        kernel = main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel] if "kernel_source" in rows else rows
        keys = rows["isl"].to_numpy(np.float64)
        if phase == "generation":
            keys = keys + rows["step"].to_numpy(np.float64)
        return (rows["batch_size"].to_numpy(np.float64), keys,
                rows["latency"].to_numpy(np.float64) * MS, kernel)

    def allreduce(self, num_gpus: int) -> tuple[np.ndarray, np.ndarray, str]:
        """(elements, seconds, kernel) of one all-reduce over ``num_gpus`` GPUs."""
        if self.comm_version is None:
            raise KernelDbError(f"{self.gpu}: the kernel database has no {self.engine} "
                                f"all-reduce table")
        df = self._table("comm", "custom_allreduce_perf.parquet", self.comm_version)
        rows = df[df["num_gpus"] == num_gpus]
        if "kernel_source" in rows:               # CUDA-graph launches, as engines run
            graph = rows[~rows["kernel_source"].astype(str).str.contains("eager")]
            rows = graph if not graph.empty else rows
        if rows.empty:
            raise KernelDbError(f"{self.gpu} {self.engine} {self.comm_version}: no all-reduce "
                                f"over {num_gpus} GPUs; it has "
                                f"{_choices(str(g) for g in set(df['num_gpus']))}")
        kernel = main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel] if "kernel_source" in rows else rows
        rows = rows.sort_values("message_size")
        return (rows["message_size"].to_numpy(np.float64),
                rows["latency"].to_numpy(np.float64) * MS, kernel)


    def activation_scales(self) -> tuple[GemmCurves, str] | None:
        """What computing FP8 activation scales at run time (one scale per token) costs over
        quantising with a fixed scale, for one GEMM input of m tokens by k: the database's
        ``quantize/<engine>/<version>/computescale_perf.parquet`` (the newest version up to
        this engine version's, else the oldest), read as a GEMM curve of n = 1 (by m, and
        log-linear in k between the widths timed); with a label naming it, or None where the
        database has no such table. The quantisation with a fixed scale itself is not here:
        the FP8 GEMM rows hold it (the collector times vLLM's whole linear layer)."""
        have = [p.parent.name for p in (self.root / self.gpu / "quantize" / self.engine).glob(
            "*/computescale_perf.parquet")]
        if not have:
            return None
        older = [v for v in have if _version_key(v) <= _version_key(self.version)]
        version = max(older, key=_version_key) if older else min(have, key=_version_key)
        df = self._table("quantize", "computescale_perf.parquet", version)
        rows = df[df["quant_dtype"] == "fp8"] if "quant_dtype" in df else df
        if rows.empty:
            return None
        curves = {}
        for k, g in rows.groupby("k"):
            # the table is a difference of two timings: one at or below zero is read as none
            points = zip(g["m"].to_numpy(np.float64),
                         np.maximum(g["latency"].to_numpy(np.float64), 0.0) * MS)
            curves[(1, int(k))] = [list(p) for p in make_table_raw(list(points))]
        return GemmCurves(curves), f"{version} {main_kernel(rows)}"

    def moe_versions(self) -> list[str]:
        """Versions with an MoE table: this engine version's first, then older ones newest
        first, then newer ones oldest first."""
        have = [p.parent.name for p in (self.root / self.gpu / "moe" / self.engine).glob(
            "*/moe_perf.parquet")]
        mine = _version_key(self.version)
        older = sorted((v for v in have if _version_key(v) <= mine), key=_version_key,
                       reverse=True)
        return older + sorted((v for v in have if _version_key(v) > mine), key=_version_key)

    def moe(self, hidden: int, inter_size: int, topk: int, num_experts: int, tp: int,
            dtype: str) -> MoeCurve:
        """Seconds of one layer's MoE op by tokens, for a model whose experts are split over
        ``tp`` GPUs as tensor-parallel MoE splits them (vLLM's default): every GPU holds
        every expert's 1/tp of ``inter_size`` (``moe_tp_size`` tp, ``moe_ep_size`` 1). From
        the first of ``moe_versions`` that times this shape in ``dtype``."""
        if dtype not in MOE_DTYPES:
            raise KernelDbError(f"weight dtype '{dtype}': profiles of mixtures of experts "
                                f"read the MoE tables in {_choices(MOE_DTYPES)}")
        versions = self.moe_versions()
        if not versions:
            base = self.root / self.gpu / "moe"
            engines = [e for e in ENGINES if any((base / e).glob("*/moe_perf.parquet"))]
            raise KernelDbError(f"{self.gpu}: the kernel database has no {self.engine} MoE "
                                f"table (moe_perf.parquet); engines with MoE tables there: "
                                f"{_choices(engines)}")
        what = (f"{num_experts} experts top {topk}, hidden {hidden}, intermediate "
                f"{inter_size}")
        timed: dict[str, set[int]] = {}           # moe_dtype -> tp degrees with this shape
        for version in versions:
            df = self._table("moe", "moe_perf.parquet", version)
            shape = df[(df["hidden_size"] == hidden) & (df["inter_size"] == inter_size)
                       & (df["topk"] == topk) & (df["num_experts"] == num_experts)
                       & (df["moe_ep_size"] == 1)]
            for t, d in shape[["moe_tp_size", "moe_dtype"]].itertuples(index=False):
                timed.setdefault(str(d), set()).add(int(t))
            rows = shape[shape["moe_tp_size"] == tp]
            for moe_dtype in MOE_DTYPES[dtype]:
                picked = rows[rows["moe_dtype"] == moe_dtype]
                if not picked.empty:
                    return MoeCurve.from_rows(picked, version, moe_dtype, tp)
        if not timed:
            shapes = set()
            for version in versions:
                df = self._table("moe", "moe_perf.parquet", version)
                cols = ["num_experts", "topk", "hidden_size", "inter_size"]
                shapes |= {f"{e}x{k} {h}/{i}" for e, k, h, i in
                           df[cols].drop_duplicates().itertuples(index=False)}
            raise KernelDbError(f"{self.gpu} {self.engine} MoE tables ({_choices(versions)}) "
                                f"do not time {what}; they time (experts x top-k "
                                f"hidden/intermediate) {_choices(shapes)}")
        raise KernelDbError(f"{self.gpu} {self.engine} MoE tables ({_choices(versions)}): no "
                            f"{what} at tp {tp} without expert parallelism in "
                            f"{' or '.join(MOE_DTYPES[dtype])}; they time it "
                            + "; ".join(f"in {d} at tp {', '.join(map(str, sorted(t)))}"
                                        for d, t in sorted(timed.items())))
