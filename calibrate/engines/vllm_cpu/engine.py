"""``fleetsim validate --engine vllm``: a validation scenario served on the real vLLM engine.

For each scenario (one pool of one replica at tp 1 on the ``cpu`` hardware, with the
``continuous`` scheduler; any number of streams):

1. the requests are drawn exactly as ``fleetsim run`` draws them; prompts become token
   ids (a stream's shared prefix is the same ids for every request of its group, the
   rest random), so vLLM's prefix cache hits where fleetsim's does;
2. the pool's limits become vLLM's settings (``plan``): token budget, sequence cap,
   block size (vLLM's CPU attention takes multiples of 32), KV blocks (exactly the
   pool's), chunked prefill, prefix caching, scheduling policy and admission gate;
3. ``calibrate/engines/vllm_cpu/serve.py`` serves them in the vLLM environment (``make vllm``) at
   their arrival times and logs every request and every step;
4. fleetsim's scheduler is replayed on the log (``calibrate.engines.vllm_cpu.schedule``) and each
   step's batch compared with vLLM's.

``plan.json`` and ``vllm_log.json`` are written per workload; ``equivalence`` redoes
step 4 on recorded files without vLLM.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import sim
from calibrate.engines.records import ContinuousLimits
from calibrate.engines.step_fit import continuous_grid
from calibrate.engines.vllm_cpu import schedule as vllm_schedule
from calibrate.engines.vllm_cpu.run_folder import LOG_NAME, PLAN_NAME, VllmError, log_file
from calibrate.engines.vllm_cpu.timing import timing
from sim.config.resolve import resolve
from sim.config.yamlio import load_yaml
from sim.cost.profile_file import load_profile, resolve_profile_path
from sim.output.files.atomic_write import write_file
from sim.output.files.output_paths import check_file
from sim.workload import generate_arrivals

SERVE_SCRIPT = Path(__file__).resolve().parent / "serve.py"
CPU_BLOCK_MULTIPLE = 32
# vLLM's CPU build serves these; the run is refused before it starts otherwise
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


@dataclass
class Plan:
    name: str
    path: Path               # the scenario
    data: dict               # the plan as JSON


def plan(path: str | Path, allow_paths: tuple[Path, ...] = ()) -> Plan:
    """The engine settings and requests for the scenario at ``path``."""
    path = Path(path)
    scenario = sim.load_scenario(path, allow_paths=allow_paths)
    if len(scenario.pools) != 1:
        raise VllmError(f"{path}: pools: the engine is one pool (found {len(scenario.pools)})")
    (name, pool), = scenario.pools.items()
    where = f"{path}: pools.{name}"
    if pool.replicas != 1 or pool.tp != 1 or pool.autoscaler is not None:
        raise VllmError(f"{where}: the engine is one replica at tp 1, without an autoscaler")
    if scenario.gateway.active:
        raise VllmError(f"{path}: gateway: the engine is served without a gateway")
    sched = pool.scheduler
    if sched.type != "continuous":
        raise VllmError(f"{where}.scheduler.type: vLLM's scheduler is 'continuous', not "
                        f"'{sched.type}'")
    if sched.long_prefill_token_threshold is not None:
        raise VllmError(f"{where}.scheduler.long_prefill_token_threshold: not validated "
                        f"against vLLM; remove it")
    if sched.priority_aging is not None:
        raise VllmError(f"{where}.scheduler.priority_aging: vLLM has no priority aging; "
                        f"remove it")
    if pool.block_size % CPU_BLOCK_MULTIPLE:
        raise VllmError(f"{where}.block_size: vLLM's CPU attention takes block sizes that "
                        f"are multiples of {CPU_BLOCK_MULTIPLE} (got {pool.block_size}); set "
                        f"block_size: {CPU_BLOCK_MULTIPLE * max(1, round(pool.block_size / 32))}")
    if pool.weight_dtype not in DTYPES or pool.kv_dtype != pool.weight_dtype:
        raise VllmError(f"{where}.weight_dtype / kv_dtype: vLLM on this CPU serves "
                        f"{' or '.join(DTYPES)} with the KV cache in the same dtype (got "
                        f"{pool.weight_dtype} and {pool.kv_dtype})")
    resolved, _ = resolve(scenario)
    spec = resolved.pools[name]
    m = spec.model
    if m.num_experts != 1:
        raise VllmError(f"{where}.model: validation builds dense Llama models; {m.name} has "
                        f"{m.num_experts} experts")
    kv_admission = sched.with_engine(spec.engine).kv_admission
    if kv_admission == "guaranteed_no_evict":
        raise VllmError(f"{where}.scheduler.kv_admission: vLLM admits 'whole_prompt' (vLLM "
                        f"0.32's default) or 'on_demand', not 'guaranteed_no_evict'")
    num_blocks = int(spec.kv.num_blocks)
    # vLLM refuses a max_model_len its cache cannot hold
    max_model_len = int(min(spec.max_model_len, num_blocks * pool.block_size))
    seed_seq = np.random.SeedSequence(scenario.seed).spawn(3)[0]
    arr = generate_arrivals(scenario.workload, scenario.duration, seed_seq,
                            path.resolve().parent)
    if arr.arrival_s.size == 0:
        raise VllmError(f"{path}: workload: the scenario draws no requests")
    streams = list(scenario.workload.streams.values())
    rng = np.random.default_rng(scenario.seed)
    prefix_ids: dict[tuple[int, int], list[int]] = {}
    requests = []
    for i in range(arr.arrival_s.size):
        s = int(arr.stream_index[i])
        stream = streams[s]
        prompt_n, output_n = int(arr.prompt_tokens[i]), int(arr.output_tokens[i])
        if prompt_n + output_n > max_model_len:
            raise VllmError(
                f"{path}: workload.streams.{arr.stream_names[s]}: request {i} needs "
                f"{prompt_n + output_n} tokens, more than the engine's {max_model_len} "
                f"(max_model_len, and the KV cache of {num_blocks} blocks of "
                f"{pool.block_size}); lower the lengths' max or enlarge kv_cache_bytes")
        ids: list[int] = []
        row = {"id": str(i), "arrival_s": float(arr.arrival_s[i]), "max_tokens": output_n,
               "priority": int(stream.priority)}
        if stream.prefix is not None:
            group = int(arr.prefix_group[i])
            key = (s, group)
            if key not in prefix_ids:
                prefix_ids[key] = rng.integers(3, m.vocab_size, stream.prefix.tokens).tolist()
            ids = list(prefix_ids[key])
            row["prefix_group"] = f"{arr.stream_names[s]}#{group}"
            row["prefix_tokens"] = stream.prefix.tokens
        ids += rng.integers(3, m.vocab_size, prompt_n - len(ids)).tolist()
        row["prompt"] = ids
        requests.append(row)
    if pool.cost_model.type != "calibrated":
        raise VllmError(f"{where}.cost_model: the timing comparison fits vLLM's step terms "
                        f"onto a calibrated profile of this CPU; set {{type: calibrated, "
                        f"profile: calibrated/cpu/tiny-llama.yaml}}")
    profile = load_profile(resolve_profile_path(pool.cost_model.profile,
                                                path.resolve().parent))
    limits = ContinuousLimits(sched.max_num_batched_tokens, sched.max_num_seqs,
                              pool.block_size, num_blocks)
    grid = [[{"arrival_s": r.arrival_s, "prompt_tokens": r.prompt_tokens,
              "max_tokens": r.output_tokens} for r in run]
            for run in continuous_grid(limits) if all(
                r.prompt_tokens + r.output_tokens <= max_model_len for r in run)]
    raw, _ = load_yaml(path)
    data = {
        "scenario": scenario.name, "scenario_yaml": raw, "profile": profile,
        "calibration": grid,
        "model": {"name": m.name, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                  "num_heads": m.num_heads, "num_kv_heads": m.num_kv_heads,
                  "head_dim": m.head_dim, "ffn_size": m.ffn_size, "vocab_size": m.vocab_size,
                  "max_model_len": int(spec.max_model_len)},
        "dtype": DTYPES[pool.weight_dtype], "seed": int(scenario.seed),
        "engine": {"max_num_batched_tokens": sched.max_num_batched_tokens,
                   "max_num_seqs": sched.max_num_seqs, "block_size": pool.block_size,
                   "num_blocks": num_blocks, "chunked_prefill": sched.chunked_prefill,
                   "prefix_caching": bool(pool.prefix_caching), "policy": sched.policy,
                   "kv_admission": kv_admission, "max_model_len": max_model_len},
        "requests": requests,
    }
    return Plan(scenario.name, path, data)


def serve(p: Plan, folder: Path, python: Path, timeout_s: float, log=print) -> Path:
    """Serve ``p`` on vLLM; returns the log's path (``folder/vllm_log.json``)."""
    folder.mkdir(parents=True, exist_ok=True)
    plan_path = folder / PLAN_NAME
    plan_path.write_text(json.dumps(p.data, separators=(",", ":")), encoding="utf-8")
    log_path = folder / LOG_NAME
    n = len(p.data["requests"])
    log(f"{p.name}: {n} requests over {p.data['requests'][-1]['arrival_s']:.0f} s on vLLM")
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", VLLM_LOGGING_LEVEL="WARNING")
    with open(folder / "vllm_stderr.txt", "wb") as err:
        try:
            proc = subprocess.run([str(python), str(SERVE_SCRIPT), str(plan_path),
                                   str(log_path)], stdout=err, stderr=err, env=env,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{p.name}: vLLM did not finish in {timeout_s:.0f} s") \
                from None
    if proc.returncode != 0 or not log_path.is_file():
        tail = (folder / "vllm_stderr.txt").read_text(encoding="utf-8", errors="replace")
        tail = "\n".join(line for line in tail.splitlines()
                         if not line.startswith("WARNING"))[-2000:]
        raise RuntimeError(f"{p.name}: vLLM exited with {proc.returncode}; the end of its "
                           f"output:\n{tail}")
    return log_path


def ship(folder: Path, dest: Path) -> None:
    """A served workload's plan (token ids left out: the comparison needs only the
    lengths) and log (gzip, no name or time in the header) into ``dest``, for tests."""
    data = vllm_schedule.read_json(folder / PLAN_NAME)
    for r in data["requests"]:
        r["prompt_tokens"] = len(r.pop("prompt"))
    _write_shipped(dest / PLAN_NAME, (json.dumps(data, indent=0) + "\n").encode("utf-8"))
    raw = json.dumps(vllm_schedule.read_json(log_file(folder)), separators=(",", ":"))
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=compressed, mode="wb", mtime=0) as gz:
        gz.write(raw.encode("utf-8"))
    _write_shipped(dest / (LOG_NAME + ".gz"), compressed.getvalue())


def equivalence(plan_path: Path, log_path: Path) -> dict:
    """Step-by-step schedule comparison of fleetsim with a recorded vLLM run."""
    served = vllm_schedule.read(plan_path, log_path)
    engine = served.batches()
    ours = vllm_schedule.replay(served)
    eq = vllm_schedule.compare(engine, ours)
    return {**eq.to_json(),
            # preemptions as the steps log them; prompt tokens found in the prefix cache
            # when a request is first admitted (vLLM's num_cached_tokens)
            "vllm_preemptions": vllm_schedule.preemptions(engine),
            "fleetsim_preemptions": vllm_schedule.preemptions(ours),
            "vllm_cached_tokens": vllm_schedule.first_hits(engine),
            "fleetsim_cached_tokens": vllm_schedule.first_hits(ours),
            "requests": len(served.records), "meta": served.meta}


def _summarise(name: str, folder: Path, log=print, write: Path | None = None) -> dict:
    eq = equivalence(folder / PLAN_NAME, log_file(folder))
    if vllm_schedule.read_json(log_file(folder)).get("calibration"):
        eq["timing"] = timing(folder, log, None if write is None else _copy_run(folder, write))
    folder = write or folder
    (folder / "equivalence.json").write_text(json.dumps(eq, indent=1) + "\n",
                                             encoding="utf-8")
    log(f"{name}: {eq['identical']}/{eq['steps']} steps identical "
        f"({100 * eq['share_identical']:.2f}%)")
    return {"workload": name, **eq}


def _copy_run(folder: Path, dest: Path) -> Path:
    """A recorded run's plan and log beside its re-analysis (``dest``)."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in (folder / PLAN_NAME, log_file(folder)):
        (dest / src.name).write_bytes(src.read_bytes())
    return dest


def serve_all(plans: list[Plan], out: Path, python: Path, log=print,
              timeout_s: float = 1800.0) -> list[dict]:
    """Serve each plan on vLLM into ``out/<name>/`` and compare; one summary each."""
    rows = []
    for p in plans:
        folder = out / p.name
        serve(p, folder, python, timeout_s, log)
        rows.append(_summarise(p.name, folder, log))
    return rows


def recorded(paths: list[str]) -> list[Path]:
    """The recorded runs named by ``paths``: folders holding plan.json and vllm_log.json
    (or .json.gz), or folders of such folders; a VllmError names what is missing."""
    folders: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise VllmError(f"{raw}: not a folder of recorded vLLM runs (a folder with "
                            f"{PLAN_NAME} and {LOG_NAME}, or a folder of such folders)")
        found = [path] if log_file(path) else sorted(
            q for q in path.iterdir() if q.is_dir() and log_file(q))
        if not found:
            raise VllmError(f"{raw}: holds no {LOG_NAME}")
        for folder in found:
            if not (folder / PLAN_NAME).is_file():
                raise VllmError(f"{folder}: {LOG_NAME} without its {PLAN_NAME}")
        folders += found
    return folders


def compare_recorded(folders: list[Path], out: Path) -> list[dict]:
    """The comparison on each recorded run, its equivalence.json written under ``out``."""
    rows = []
    for folder in folders:
        try:
            (out / folder.name).mkdir(parents=True, exist_ok=True)
            rows.append(_summarise(folder.name, folder, log=lambda _m: None,
                                   write=out / folder.name))
        except (VllmError, vllm_schedule.ServeLogError):
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
                ZeroDivisionError, RuntimeError) as exc:
            # a file that is not what fleetsim recorded: named, never quoted
            raise VllmError(f"{folder}: not a recorded vLLM run fleetsim can read "
                            f"({type(exc).__name__} while reading its plan and log)") from None
    return rows


SHIPPED = (PLAN_NAME, LOG_NAME + ".gz", "equivalence.json")


def _shipped(path: Path) -> bool:
    """True if ``path`` is a file ``ship_run`` writes: JSON (gzip-compressed for the log)
    holding an object, as a served run's plan, log and equivalence are."""
    try:
        return path.name in SHIPPED and isinstance(vllm_schedule.read_json(path), dict)
    except vllm_schedule.ServeLogError:
        return False


def _write_shipped(path: Path, data: bytes) -> None:
    check_file(path, kind="a shipped vLLM run file fleetsim wrote", is_kind=_shipped)
    write_file(path, data)


def ship_run(run_folder: Path, dest: Path) -> int:
    """``python -m calibrate vllm-ship RUN_FOLDER DEST``: copy a served run's workloads
    and its equivalence.json into DEST for the tests (``make vllm-recorded``), replacing
    only files shipped before."""
    for folder in recorded([str(run_folder)]):
        ship(folder, dest / folder.name)
        print(f"{folder.name} -> {dest / folder.name}")
    report = run_folder / "equivalence.json"     # what the served run found, to compare
    if report.is_file():
        _write_shipped(dest / report.name, report.read_bytes())
    return 0
