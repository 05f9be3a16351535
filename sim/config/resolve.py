"""Cross-block checks and name resolution, after pydantic has typed each block.

Produces a ``Resolved`` scenario in which every pool carries its model and
hardware specs and its KV budget, and every stream its pool; or raises a
``ScenarioError`` listing each problem at its field.

Why one module of about 400 lines: resolving is one pass in which each check reads what
the ones before it resolved (a pool's profiles, then its memory and KV blocks, then the
routes that send streams to it); the checks that need no resolved fleet live in
``sanity.py``, those that need built pools in ``sim/core/checks.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.config import profiles
from sim.config.specs import HardwareSpec, ModelSpec
from sim.config import engines, sanity, stages
from sim.config.engines import EnginePreset
from sim.config.lengths import prompt_range, shortest
from sim.config.scenario import PoolConfig, Scenario
from sim.cost.memory import KvBudget, kv_budget, weights_per_gpu

Loc = tuple


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


def _choices(names) -> str:
    return ", ".join(sorted(names, key=str.lower))


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
                         f"{_choices(set(profiles.model_names()) | set(scenario.models))}"))
    if hw is None:
        problems.append((here + ("hardware",), f"unknown hardware '{pool.hardware}'; known: "
                         f"{_choices(set(profiles.hardware_names()) | set(scenario.hardware))}"))
    if model is not None:
        problems.extend(_check_sizing(here, pool, model, scenario))
    if model is None or hw is None:
        return None
    tp = pool.tp
    if tp > hw.max_gpus_per_node:
        problems.append((here + ("tp",), f"tp={tp} exceeds the {hw.max_gpus_per_node} GPUs "
                         f"of one {hw.name} node"))
        return None
    if not _splits_heads(model, tp):
        valid = _valid_tps(model, hw)
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
                             f"{_choices(set(profiles.model_names()) | set(scenario.models))}"))
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
        field, message = _no_room(model, hw, pool)
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


def _check_sizing(here: Loc, pool: PoolConfig, model, scenario: Scenario
                  ) -> list[tuple[Loc, str]]:
    """The GPU kinds, TP degrees and pipeline stage counts `fleetsim size` is asked to try
    exist for the model (an option that exists but does not fit is a finding of the search,
    not an error)."""
    opts, problems = pool.sizing, []
    if opts is None:
        return problems
    known = set(profiles.hardware_names()) | set(scenario.hardware)
    kinds = [profiles.find_hardware(h, scenario.hardware) for h in opts.hardware or ()]
    for i, (name, hw) in enumerate(zip(opts.hardware or (), kinds)):
        if hw is None:
            problems.append((here + ("sizing", "hardware", i), f"unknown hardware '{name}'; "
                             f"known: {_choices(known)}"))
    decodes_for = _decodes_for(here[-1], scenario)
    draft_name = pool.scheduler.draft_model_name
    draft = profiles.find_model(draft_name, scenario.models) if draft_name else None
    for i, pp in enumerate(opts.pp or ()):
        problem = stages.too_many_stages(model, pp)
        decode = stages.decode_stages(here[-1], decodes_for, pp) if decodes_for else None
        shallow = stages.draft_too_shallow(draft, pp) if draft else None
        if problem is None and decode is not None:
            problem = f"{decode}; list only pp: [1] under sizing (or leave sizing.pp out)"
        elif problem is None and shallow is not None:
            problem = f"{shallow}; try at most pp={draft.num_layers}"
        if problem is not None:
            problems.append((here + ("sizing", "pp", i), problem))
    if not opts.tp:
        return problems
    kinds = [hw for hw in kinds if hw is not None] or \
        [h for h in [profiles.find_hardware(pool.hardware, scenario.hardware)] if h is not None]
    largest = max((hw.max_gpus_per_node for hw in kinds), default=None)
    for i, tp in enumerate(opts.tp):
        if not _splits_heads(model, tp):
            valid = [t for t in range(1, (largest or 8) + 1) if _splits_heads(model, t)]
            problems.append((here + ("sizing", "tp", i), f"tp={tp} does not divide "
                             f"{model.name}'s {model.num_heads} attention heads / "
                             f"{model.num_kv_heads} KV heads; valid: "
                             f"{', '.join(map(str, valid))}"))
        elif largest is not None and tp > largest:
            problems.append((here + ("sizing", "tp", i), f"tp={tp} exceeds the {largest} "
                             "GPUs of one node of every GPU kind tried"))
    return problems


def _decodes_for(pool: str, scenario: Scenario) -> str | None:
    """The served model a pool decodes for as a disaggregated decode pool, if any."""
    for name, served in scenario.gateway.models.items():
        split = served.disaggregated
        if split is not None and split.decode == pool:
            return name
    return None


def _splits_heads(model, tp: int) -> bool:
    """``tp`` GPUs share the attention heads evenly (KV heads split or replicated)."""
    return model.num_heads % tp == 0 and (model.num_kv_heads % tp == 0
                                          or tp % model.num_kv_heads == 0)


def _valid_tps(model, hw) -> list[int]:
    return [t for t in range(1, hw.max_gpus_per_node + 1) if _splits_heads(model, t)]


def _no_room(model, hw, pool: PoolConfig) -> tuple[str, str]:
    """The field at fault and the message when a pool's replica has no KV block: the
    weights do not fit (a larger tp, if one fits, else no tp does and, if some does, the
    fewest pipeline stages at the widest tp that fit), or they fit but the
    requested kv_cache_bytes or the reserve do not."""
    gib = 2 ** 30
    usable = hw.planning_memory * pool.gpu_memory_utilization
    weights = model.weight_bytes(pool.weight_dtype)
    per_gpu = weights_per_gpu(model, pool.weight_dtype, pool.tp, pool.pp)
    at = f"tp={pool.tp}" + (f", pp={pool.pp}" if pool.pp > 1 else "")
    where = (f"{pool.tp * pool.pp} x {hw.name} ({hw.planning_memory / gib:.1f} GiB each as "
             f"the driver reports it, x gpu_memory_utilization {pool.gpu_memory_utilization:g} = "
             f"{usable / gib:.1f} GiB)")
    left = usable - per_gpu - pool.activation_reserve
    if per_gpu + pool.activation_reserve < usable:
        if pool.kv_cache_bytes:                 # the weights fit: the asked KV does not
            return "kv_cache_bytes", (
                f"kv_cache_bytes {pool.kv_cache_bytes / gib:.2f} GiB per GPU does not fit on "
                f"{where} beside {per_gpu / gib:.1f} GiB of {model.name} weights and "
                f"activation_reserve {pool.activation_reserve / gib:.2f} GiB: at most "
                f"{left / gib:.2f} GiB is left")
        return "activation_reserve", (        # a KV block is larger than what is left
            f"{model.name} on {where} leaves {left / gib:.3f} GiB for the KV cache after "
            f"{per_gpu / gib:.1f} GiB of weights and activation_reserve "
            f"{pool.activation_reserve / gib:.2f} GiB: less than one block")
    # (a larger tp whose pp stages could not be placed on linked nodes is no way out)
    larger = [t for t in _valid_tps(model, hw) if t > pool.tp
              and stages.unreachable_nodes(hw, t, pool.pp) is None
              and weights_per_gpu(model, pool.weight_dtype, t, pool.pp)
              + pool.activation_reserve < usable]
    if larger:
        hint = f"; it fits at tp={larger[0]}"
    else:
        placed = "" if pool.pp == 1 else (
            f" that places its {pool.pp} stages" + ("" if hw.internode_bandwidth is not None
                                                   else " in one node"))
        hint = (f"; no tp up to the {hw.max_gpus_per_node} GPUs of one {hw.name} node"
                f"{placed} leaves room: choose a GPU with more memory or smaller weights "
                f"(weight_dtype fp8 or int4)")
        widest = max(_valid_tps(model, hw), default=None)
        deeper = widest and stages.fitting_pp(model, hw, widest, pool.pp, pool.weight_dtype,
                                              usable, pool.activation_reserve)
        if deeper:
            hint += (f", or split its layers into pipeline stages: pp={deeper} at "
                     f"tp={widest} leaves room ({widest * deeper} GPUs a replica)")
    return "tp", (f"{model.name} ({pool.weight_dtype}, {weights / gib:.1f} GiB of weights, "
                  f"{per_gpu / gib:.1f} GiB per GPU at {at}) leaves no room for a KV "
                  f"cache on {where} with activation_reserve "
                  f"{pool.activation_reserve / gib:.2f} GiB{hint}")


# routes that name two pools: (field, first role, second role, why they must differ)
_TWO_POOL_ROUTES = (("by_prompt_length", "short", "long", "the route would do nothing"),
                    ("disaggregated", "prefill", "decode", "disaggregation needs two pools"))


def _one_pool_twice(loc: Loc, first: str, second: str, roles: str, why: str
                    ) -> list[tuple[Loc, str]]:
    """A route that names the same pool for both of its roles."""
    if first != second:
        return []
    return [(loc, f"{roles} are both pool '{first}': {why} (for one pool, route with "
                  "`pools:`)")]


def _check_gateway(scenario: Scenario, problems: list[tuple[Loc, str]]) -> None:
    gw = scenario.gateway
    for alias, target in gw.aliases.items():
        if target in gw.aliases and gw.aliases[target] in gw.models:
            problems.append((("gateway", "aliases", alias), f"alias target '{target}' is an "
                             f"alias itself (of '{gw.aliases[target]}'), and aliases do not "
                             f"chain: write {alias}: {gw.aliases[target]}"))
        elif target not in gw.models:
            problems.append((("gateway", "aliases", alias), f"alias target '{target}' is not a "
                             f"served model; served: {_choices(gw.models) or 'none'}"))
        elif alias in gw.models:
            problems.append((("gateway", "aliases", alias), f"'{alias}' is both an alias (of "
                             f"'{target}') and a served model: the alias would win and the "
                             f"served model '{alias}' could never be called; rename one"))
    for name, served in gw.models.items():
        here = ("gateway", "models", name)
        pools = dict(served.pools)
        if served.cascade is not None:
            pools = {served.cascade.first: 1.0, served.cascade.then: 1.0}
        for field, one, two, why in _TWO_POOL_ROUTES:
            route = getattr(served, field)
            if route is not None:
                first, second = getattr(route, one), getattr(route, two)
                pools = {first: 1.0, second: 1.0}
                problems.extend(_one_pool_twice(here + (field, two), first, second,
                                                f"{one} and {two}", why))
        split = served.disaggregated
        if split is not None:
            # (one pool serves one model: only two pools can disagree)
            if split.prefill in scenario.pools and split.decode in scenario.pools and \
                    scenario.pools[split.prefill].model != scenario.pools[split.decode].model:
                problems.append((here + ("disaggregated", "decode"), f"pool '{split.decode}' "
                                 f"serves '{scenario.pools[split.decode].model}' but prefill "
                                 f"pool '{split.prefill}' serves "
                                 f"'{scenario.pools[split.prefill].model}': one model's KV "
                                 "cache cannot be decoded by another"))
            elif split.prefill in scenario.pools and split.decode in scenario.pools:
                problems.extend(_decode_shorter(split.prefill, split.decode, scenario))
            decode = (stages.decode_stages(split.decode, name, scenario.pools[split.decode].pp)
                      if split.decode in scenario.pools else None)
            if decode is not None:
                problems.append((("pools", split.decode, "pp"), f"{decode}; give the decode "
                                 "pool pp: 1 (its prefill pool may keep stages)"))
        base = name.split("@", 1)[0].lower()
        for pool in pools:
            if pool not in scenario.pools:
                problems.append((here, f"unknown pool '{pool}'; pools: {_choices(scenario.pools)}"))
            elif "@" in name and scenario.pools[pool].model.lower() != base:
                problems.append((here, f"'{name}' is routed to pool '{pool}', which serves "
                                 f"'{scenario.pools[pool].model}', not '{base}'"))
            else:
                problems.extend((here, msg) for msg in _needs_unmet(name, served, pool,
                                                                    scenario))


def _decode_shorter(prefill: str, decode: str, scenario: Scenario
                    ) -> list[tuple[Loc, str]]:
    """A decode pool that takes shorter contexts than its prefill pool: the requests
    between would be prefilled, sent over the link and then refused."""
    first, then = scenario.pools[prefill], scenario.pools[decode]
    if then.max_model_len is None or (first.max_model_len is not None
                                      and first.max_model_len <= then.max_model_len):
        return []
    model = profiles.find_model(first.model, scenario.models)
    if model is None:               # (said where the pool names it)
        return []
    longest = first.max_model_len or model.max_model_len
    if longest <= then.max_model_len:
        return []
    return [(("pools", decode, "max_model_len"), f"decode pool '{decode}' takes contexts "
             f"of up to {then.max_model_len:,} tokens, prefill pool '{prefill}' up to "
             f"{longest:,}: requests between would be prefilled, their KV cache sent, and "
             f"then refused; give both pools the same max_model_len")]


def _needs_unmet(name: str, served, pool_name: str, scenario: Scenario) -> list[str]:
    """What a served model needs (dtype, GPU kind, TP, memory) that its pool lacks."""
    pool = scenario.pools[pool_name]
    hw = profiles.find_hardware(pool.hardware, scenario.hardware)
    out = []
    if served.weight_dtype is not None and pool.weight_dtype != served.weight_dtype:
        out.append(f"'{name}' is a {served.weight_dtype} variant but pool '{pool_name}' runs "
                   f"{pool.weight_dtype} weights")
    if served.hardware is not None and hw is not None and \
            hw.name.lower() not in {h.lower() for h in served.hardware}:
        out.append(f"'{name}' runs on {', '.join(served.hardware)}; pool '{pool_name}' has "
                   f"{hw.name}")
    if served.min_tp is not None and pool.tp < served.min_tp:
        out.append(f"'{name}' needs at least tp={served.min_tp}; pool '{pool_name}' has "
                   f"tp={pool.tp}")
    if served.min_gpu_memory is not None and hw is not None and hw.memory < served.min_gpu_memory:
        out.append(f"'{name}' needs {served.min_gpu_memory / 2 ** 30:.0f} GiB per GPU; "
                   f"{hw.name} has {hw.memory / 2 ** 30:.0f} GiB")
    return out


def _route_streams(scenario: Scenario, problems: list[tuple[Loc, str]]) -> dict[str, str]:
    routes: dict[str, str] = {}
    gw = scenario.gateway
    for sname, stream in scenario.workload.streams.items():
        here = ("workload", "streams", sname)
        served_name = gw.served_name(stream.model)
        served = gw.route_for(stream.model, stream.pool)
        if served is not None:
            routes[sname] = served.entry_pools()[0]      # the first a request may go to
            continue
        if stream.pool is not None:
            if stream.pool not in scenario.pools:
                problems.append((here + ("pool",), f"unknown pool '{stream.pool}'; pools: "
                                 f"{_choices(scenario.pools)}"))
                continue
            serves = scenario.pools[stream.pool].model
            wanted = (served_name.split("@", 1)[0] if served_name in gw.models
                      else stream.model)
            if wanted is not None and wanted.lower() != serves.lower():
                problems.append((here + ("pool",), f"pool '{stream.pool}' serves '{serves}', "
                                 f"not the stream's model '{stream.model}'; drop `pool:` to "
                                 "route by model, or name a pool that serves it"))
                continue
            routes[sname] = stream.pool
            continue
        if stream.model is None:
            if len(scenario.pools) == 1:
                routes[sname] = next(iter(scenario.pools))
            else:
                problems.append((here, "give `model:` or `pool:`: the scenario has several pools"))
            continue
        serving = [p for p, cfg in scenario.pools.items()
                   if cfg.model.lower() == stream.model.lower()]
        if len(serving) == 1:
            routes[sname] = serving[0]
        elif stream.model in gw.aliases:
            continue        # an alias to no served model: reported at the alias
        elif not serving:
            models = {cfg.model for cfg in scenario.pools.values()}
            names = f"pools' models: {_choices(models)}"
            if gw.models or gw.aliases:
                names = (f"the gateway's served names: {_choices(gw.models) or 'none'}"
                         + (f", aliases: {_choices(gw.aliases)}" if gw.aliases else "")
                         + "; " + names)
            problems.append((here + ("model",), f"no pool serves model '{stream.model}'; "
                             f"{names}"))
        else:
            problems.append((here + ("model",), f"model '{stream.model}' is served by pools "
                             f"{_choices(serving)}; pick one with `pool:`"))
    return routes


def _length_split_used(scenario: Scenario) -> list[tuple[Loc, str]]:
    """A by-prompt-length route whose threshold no prompt of the streams calling it can
    reach (or every prompt reaches): one of its pools would never be used."""
    gw, problems = scenario.gateway, []
    for name, served in gw.models.items():
        rule = served.by_prompt_length
        if rule is None:
            continue
        ranges = [prompt_range(s) for s in scenario.workload.streams.values()
                  if s.model is not None and s.pool is None
                  and gw.served_name(s.model) == name]
        if not ranges:
            continue
        here = ("gateway", "models", name, "by_prompt_length", "threshold_tokens")
        lows, highs = [lo for lo, _ in ranges], [hi for _, hi in ranges]
        if None not in highs and max(highs) < rule.threshold_tokens:
            problems.append((here, f"no prompt reaches {rule.threshold_tokens:,} tokens (the "
                             f"longest its streams send is {max(highs):,}): pool "
                             f"'{rule.long}' would never be used; lower the threshold"))
        elif None not in lows and min(lows) >= rule.threshold_tokens:
            problems.append((here, f"every prompt is at least {rule.threshold_tokens:,} "
                             f"tokens (the shortest its streams send is {min(lows):,}): pool "
                             f"'{rule.short}' would never be used; raise the threshold"))
    return problems


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
    _check_gateway(scenario, problems)
    routes = _route_streams(scenario, problems)
    problems.extend(sanity.check(scenario))
    problems.extend(_length_split_used(scenario))
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
