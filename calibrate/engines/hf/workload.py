"""Workloads: a validation scenario read as the engine's workload, and its requests drawn as
`fleetsim run` draws them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

import sim
from calibrate.engines.records import ContinuousLimits, EngineRecord, EngineRequest
from calibrate.fitting.shapes import ModelShape
from sim.config.resolve import resolve
from sim.workload import generate_arrivals


# metric name -> (what, target relative error or None)
METRICS = {
    "ttft_p50_s": ("TTFT p50", 0.10),
    "ttft_p90_s": ("TTFT p90", 0.20),
    "ttft_p99_s": ("TTFT p99", None),
    "tpot_p50_s": ("TPOT p50", 0.10),
    "tpot_p90_s": ("TPOT p90", None),
    "e2e_p50_s": ("E2E p50", None),
    "output_tokens_per_s": ("output tok/s", 0.10),
}


class ValidationError(ValueError):
    """A validation scenario that cannot be validated (named, with the reason)."""


@dataclass
class Workload:
    path: Path
    raw: dict                        # the scenario as written
    scenario: object                 # sim Scenario
    pool_name: str
    kind: str                        # "continuous" or "single"
    limits: ContinuousLimits | None
    shape: ModelShape


@dataclass
class WorkloadResult:
    name: str
    kind: str
    num_requests: int
    measured: dict
    predicted: dict
    errors: dict
    step_error: dict
    engine_requests: list[EngineRecord]
    sim_requests: object             # pandas DataFrame
    wall_s: float                    # the engine's time on every replay
    replays: int = 1


# -- scenarios ---------------------------------------------------------------------------
def load_workload(path: str | Path, allow_paths: tuple[Path, ...] = ()) -> Workload:
    scenario = sim.load_scenario(path, allow_paths=allow_paths)
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    where = f"{path}"
    if len(scenario.workload.streams) != 1 or len(scenario.pools) != 1:
        raise ValidationError(f"{where}: a validation scenario has exactly one stream and one "
                              f"pool (found {len(scenario.workload.streams)} and "
                              f"{len(scenario.pools)})")
    (pool_name, pool), = scenario.pools.items()
    if pool.replicas != 1 or pool.tp != 1 or pool.autoscaler is not None:
        raise ValidationError(f"{where}: pools.{pool_name}: the engine is one replica at tp 1, "
                              f"without an autoscaler")
    if pool.cost_model.type != "calibrated":
        raise ValidationError(f"{where}: pools.{pool_name}.cost_model: validation compares the "
                              f"calibrated cost model; set {{type: calibrated, profile: ...}}")
    (stream_name, stream), = scenario.workload.streams.items()
    if stream.prefix is not None:
        raise ValidationError(f"{where}: workload.streams.{stream_name}.prefix: shared prefixes "
                              f"are not validated (the engine's prompts are random tokens)")
    if scenario.gateway.active:
        raise ValidationError(f"{where}: gateway: validation runs one engine without a gateway")
    resolved, problems = resolve(scenario)
    spec = resolved.pools[pool_name]
    sched = pool.scheduler
    if sched.type == "continuous":
        if not sched.chunked_prefill or sched.policy != "fcfs" or \
                sched.long_prefill_token_threshold is not None:
            raise ValidationError(
                f"{where}: pools.{pool_name}.scheduler: the engine schedules FCFS with chunked "
                f"prefill and no long-prefill cap")
        limits = ContinuousLimits(max_batch_tokens=sched.max_num_batched_tokens,
                                  max_requests_per_batch=sched.max_num_seqs,
                                  page_size=pool.block_size, num_blocks=spec.kv.num_blocks)
    elif sched.type == "single":
        limits = None
    else:
        raise ValidationError(f"{where}: pools.{pool_name}.scheduler.type: validation covers "
                              f"'continuous' and 'single', not '{sched.type}'")
    m = spec.model
    shape = ModelShape(name=m.name, num_layers=m.num_layers, hidden_size=m.hidden_size,
                       num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
                       ffn_size=m.ffn_size, vocab_size=m.vocab_size,
                       num_experts=m.num_experts, experts_per_token=m.experts_per_token,
                       max_model_len=spec.max_model_len)
    return Workload(Path(path), raw, scenario, pool_name, sched.type, limits, shape)


def draw_requests(w: Workload) -> list[EngineRequest]:
    """The scenario's requests, drawn as ``fleetsim run`` draws them."""
    workload_seq = np.random.SeedSequence(w.scenario.seed).spawn(3)[0]
    arr = generate_arrivals(w.scenario.workload, w.scenario.duration, workload_seq,
                            w.path.resolve().parent)
    return [EngineRequest(float(a), int(p), int(o))
            for a, p, o in zip(arr.arrival_s, arr.prompt_tokens, arr.output_tokens)]


def check_workloads(workloads: list[Workload]) -> None:
    if len({w.shape for w in workloads}) != 1:
        raise ValidationError("every validation scenario must serve the same model")
    names = [w.scenario.name for w in workloads]
    if len(set(names)) != len(names):
        raise ValidationError(f"validation scenarios need distinct names, got {names}")


# -- a recorded run, without the engine ------------------------------------------------------
def safe_name(name: str, default: str) -> str:
    name = Path(str(name)).name
    ok = name and all(c.isalnum() or c in "._-" for c in name) and not name.startswith(".")
    return name if ok else default
