"""Each stream's pool: by the gateway's route, its ``pool:``, or the one pool serving its
model; and by-prompt-length routes whose threshold the streams' prompts never cross."""
from __future__ import annotations

from sim.config.errors import Loc, choices
from sim.config.lengths import prompt_range
from sim.config.scenario import Scenario


def route_streams(scenario: Scenario, problems: list[tuple[Loc, str]]) -> dict[str, str]:
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
                                 f"{choices(scenario.pools)}"))
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
            names = f"pools' models: {choices(models)}"
            if gw.models or gw.aliases:
                names = (f"the gateway's served names: {choices(gw.models) or 'none'}"
                         + (f", aliases: {choices(gw.aliases)}" if gw.aliases else "")
                         + "; " + names)
            problems.append((here + ("model",), f"no pool serves model '{stream.model}'; "
                             f"{names}"))
        else:
            problems.append((here + ("model",), f"model '{stream.model}' is served by pools "
                             f"{choices(serving)}; pick one with `pool:`"))
    return routes


def length_split_used(scenario: Scenario) -> list[tuple[Loc, str]]:
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

