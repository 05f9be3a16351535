"""The gateway's checks against the pools: aliases, the pools each served model is routed
to (two-pool routes, disaggregation, what a served model needs of its pool)."""
from __future__ import annotations

from sim.config import profiles, stages
from sim.config.errors import Loc, choices
from sim.config.scenario import Scenario


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


def check_gateway(scenario: Scenario, problems: list[tuple[Loc, str]]) -> None:
    gw = scenario.gateway
    for alias, target in gw.aliases.items():
        if target in gw.aliases and gw.aliases[target] in gw.models:
            problems.append((("gateway", "aliases", alias), f"alias target '{target}' is an "
                             f"alias itself (of '{gw.aliases[target]}'), and aliases do not "
                             f"chain: write {alias}: {gw.aliases[target]}"))
        elif target not in gw.models:
            problems.append((("gateway", "aliases", alias), f"alias target '{target}' is not a "
                             f"served model; served: {choices(gw.models) or 'none'}"))
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
                problems.append((here, f"unknown pool '{pool}'; pools: {choices(scenario.pools)}"))
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

