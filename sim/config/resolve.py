"""Cross-block checks and name resolution, after pydantic has typed each block.

Produces a ``Resolved`` scenario in which every pool carries its model and
hardware specs and its KV budget, and every stream its pool; or raises a
``ScenarioError`` listing each problem at its field.

A pool is checked here in one pass, each check reading what the ones before it resolved
(its engine, profiles, heads and stages, draft model, memory and KV blocks, cost model),
with what it asks of the model's fit on the GPUs in ``pool_fit.py`` and of its sizing
options in ``sizing_checks.py``; the gateway's routes are checked in
``gateway_checks.py``, the streams routed to pools in ``stream_routes.py``. The checks
that need no resolved fleet live in ``sanity.py``, those that need built pools in
``sim/core/checks.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.config import profiles
from sim.config.specs import HardwareSpec, ModelSpec
from sim.config import engines, sanity, stages
from sim.config.engines import EnginePreset
from sim.config.errors import Loc, choices
from sim.config.gateway_checks import check_gateway
from sim.config.lengths import shortest
from sim.config.pool_fit import no_room, splits_heads, valid_tps
from sim.config.scenario import PoolConfig, Scenario
from sim.config.sizing_checks import check_sizing
from sim.config.stream_routes import length_split_used, route_streams
from sim.cost.memory import KvBudget, kv_budget


@dataclass(frozen=True)
class ResolvedPool:
    name: str
    cfg: PoolConfig
    model: ModelSpec
    hardware: HardwareSpec
    kv: KvBudget
    max_model_len: int
    price_per_gpu_hour: float
    engine: EnginePreset             # the engine version it runs (sim/config/engines.py)
    draft_model: ModelSpec | None = None   # its scheduler's draft model, if any

    @property
    def gpus_per_replica(self) -> int:
        """tp GPUs for each of pp pipeline stages."""
        return self.cfg.tp * self.cfg.pp


@dataclass(frozen=True)
class Resolved:
    scenario: Scenario
    pools: dict[str, ResolvedPool]
    stream_pool: dict[str, str]      # stream name -> pool name


def _price(pool: PoolConfig, hw: HardwareSpec) -> float | None:
    if pool.price_per_gpu_hour is not None:
        return pool.price_per_gpu_hour
    return getattr(hw.price_per_gpu_hour, pool.pricing)


def _cost_model_problems(pool: PoolConfig, model, scenario: Scenario) -> list:
    """What the pool's cost model finds wrong with the pool (a profile that does not
    read or was made for another shape): (field under the pool, message)."""
    from sim.config.inputs import scenario_files
    files = scenario_files(scenario) if getattr(scenario, "_source", None) else None
    return pool.cost_model.problems(pool, model, files)


def _check_pool(name: str, pool: PoolConfig, scenario: Scenario,
                problems: list[tuple[Loc, str]]) -> ResolvedPool | None:
    here = ("pools", name)
    engine = engines.resolve(pool.engine, scenario.engines)
    if isinstance(engine, str):
        problems.append((here + ("engine",), engine))
        return None
    problems.extend((here + ("scheduler",) + loc, message) for loc, message
                    in pool.scheduler.problems(engine, scenario.duration))
    model = profiles.find_model(pool.model, scenario.models)
    hw = profiles.find_hardware(pool.hardware, scenario.hardware)
    if model is None:
        problems.append((here + ("model",), f"unknown model '{pool.model}'; known models: "
                         f"{choices(set(profiles.model_names()) | set(scenario.models))}"))
    if hw is None:
        problems.append((here + ("hardware",), f"unknown hardware '{pool.hardware}'; known: "
                         f"{choices(set(profiles.hardware_names()) | set(scenario.hardware))}"))
    if model is not None:
        problems.extend(check_sizing(here, pool, model, scenario))
    if model is None or hw is None:
        return None
    tp = pool.tp
    if tp > hw.max_gpus_per_node:
        problems.append((here + ("tp",), f"tp={tp} exceeds the {hw.max_gpus_per_node} GPUs "
                         f"of one {hw.name} node"))
        return None
    if not splits_heads(model, tp):
        valid = valid_tps(model, hw)
        problems.append((here + ("tp",), f"tp={tp} does not divide {model.name}'s "
                         f"{model.num_heads} attention heads / {model.num_kv_heads} KV heads; "
                         f"valid: {', '.join(map(str, valid))}"))
        return None
    stage_problem = (stages.too_many_stages(model, pool.pp)
                     or stages.unreachable_nodes(hw, tp, pool.pp))
    if stage_problem is not None:
        problems.append((here + ("pp",), stage_problem))
        return None
    draft_name = pool.scheduler.draft_model_name
    draft = None
    if draft_name is not None:
        draft = profiles.find_model(draft_name, scenario.models)
        if draft is None:
            problems.append((here + ("scheduler", "draft_model"),
                             f"unknown draft model '{draft_name}'; known models: "
                             f"{choices(set(profiles.model_names()) | set(scenario.models))}"))
            return None
        if pool.cost_model.one_model:
            problems.append((here + ("cost_model",), f"a {pool.cost_model.type} cost model "
                             f"is measured on one model, and the draft model '{draft.name}' "
                             "needs its own step times: use cost_model auto or roofline"))
            return None
        shallow = stages.draft_too_shallow(draft, pool.pp)
        if shallow is not None:
            problems.append((here + ("pp",), f"{shallow}; lower pp or name a draft model "
                             f"with at least {pool.pp} layers"))
            return None
        if draft.total_params >= model.total_params:
            problems.append((here + ("scheduler", "draft_model"), f"draft model "
                             f"'{draft.name}' ({draft.total_params / 1e9:.3g}B parameters) is "
                             f"not smaller than the model it drafts for, '{model.name}' "
                             f"({model.total_params / 1e9:.3g}B): drafting would cost more "
                             "than it saves; name a smaller model"))
            return None
    if pool.max_model_len is not None and pool.max_model_len > model.max_model_len:
        problems.append((here + ("max_model_len",), f"max_model_len {pool.max_model_len} is "
                         f"longer than {model.name}'s context of {model.max_model_len} "
                         "tokens (engines refuse it); lower it or leave it unset"))
        return None
    price = _price(pool, hw)
    if price is None:
        problems.append((here + ("pricing",), f"{hw.name} has no {pool.pricing} price; "
                         f"set price_per_gpu_hour"))
        return None
    kv = kv_budget(model, hw, tp=tp, weight_dtype=pool.weight_dtype, kv_dtype=pool.kv_dtype,
                   block_size_tokens=pool.block_size,
                   gpu_memory_utilization=pool.gpu_memory_utilization,
                   activation_reserve_bytes=pool.activation_reserve,
                   kv_cache_bytes=pool.kv_cache_bytes, draft=draft, pp=pool.pp)
    if kv.num_blocks <= 0:
        field, message = no_room(model, hw, pool)
        # located at the field at fault when the scenario sets it, else at the model
        problems.append((here + (field if field in pool.model_fields_set else "model",),
                         message))
        return None
    cost_problems = _cost_model_problems(pool, model, scenario)
    problems.extend((here + loc, message) for loc, message in cost_problems)
    if cost_problems:
        return None
    max_len = min(pool.max_model_len or model.max_model_len, model.max_model_len)
    return ResolvedPool(name=name, cfg=pool, model=model, hardware=hw, kv=kv,
                        max_model_len=max_len, price_per_gpu_hour=price, engine=engine,
                        draft_model=draft)


def _shortest_request_fits(scenario: Scenario, sname: str, pool: ResolvedPool | None
                           ) -> list[tuple[Loc, str]]:
    """A stream sent straight to a pool whose every request would be refused as too long:
    its shortest possible request (prompt, prefix and output) past the pool's context."""
    stream = scenario.workload.streams[sname]
    if pool is None or stream.prompt_tokens is None or stream.output_tokens is None or \
            scenario.gateway.route_for(stream.model, stream.pool) is not None:
        return []
    prompt, output = shortest(stream.prompt_tokens), shortest(stream.output_tokens)
    if prompt is None or output is None:
        return []
    prefix = stream.prefix.tokens if stream.prefix is not None else 0
    least = prefix + prompt + output
    if least <= pool.max_model_len or prefix + 2 > pool.max_model_len:   # (the prefix's own)
        return []
    return [(("workload", "streams", sname), f"its shortest request ({least} tokens: "
             f"{prefix} of prefix, {prompt} of prompt, {output} of output) is longer than "
             f"pool '{pool.name}' takes (max_model_len {pool.max_model_len}): every request "
             "would be refused")]


def resolve(scenario: Scenario) -> tuple[Resolved | None, list[tuple[Loc, str]]]:
    problems: list[tuple[Loc, str]] = []
    pools = {}
    for name, pool in scenario.pools.items():
        resolved = _check_pool(name, pool, scenario, problems)
        if resolved is not None:
            pools[name] = resolved
    check_gateway(scenario, problems)
    routes = route_streams(scenario, problems)
    problems.extend(sanity.check(scenario))
    problems.extend(length_split_used(scenario))
    for sname, pool_name in routes.items():
        problems.extend(_shortest_request_fits(scenario, sname, pools.get(pool_name)))
        prefix = scenario.workload.streams[sname].prefix
        pool = pools.get(pool_name)
        if prefix is not None and pool is not None and prefix.tokens + 2 > pool.max_model_len:
            problems.append((("workload", "streams", sname, "prefix", "tokens"), f"a prefix "
                             f"of {prefix.tokens} tokens leaves no room for a prompt token and "
                             f"an output token in pool '{pool_name}' (max_model_len "
                             f"{pool.max_model_len}): every request would be refused"))
    if problems:
        return None, problems
    return Resolved(scenario=scenario, pools=pools, stream_pool=routes), problems
