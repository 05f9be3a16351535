"""The sizing options of a pool (``sizing:``, what `fleetsim size` is asked to try): the
GPU kinds, TP degrees and pipeline stage counts exist for the model."""
from __future__ import annotations

from sim.config import profiles, stages
from sim.config.errors import Loc, choices
from sim.config.pool_fit import splits_heads
from sim.config.scenario import PoolConfig, Scenario


def check_sizing(here: Loc, pool: PoolConfig, model, scenario: Scenario
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
                             f"known: {choices(known)}"))
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
        if not splits_heads(model, tp):
            valid = [t for t in range(1, (largest or 8) + 1) if splits_heads(model, t)]
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

