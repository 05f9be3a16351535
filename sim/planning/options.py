"""The options `fleetsim size` tries for a pool (its ``sizing:`` grid of hardware, TP,
pipeline stages and precisions) and what each sets of the pool."""
from __future__ import annotations

import itertools

import sim
from sim.config.resolve import resolve
from sim.config.scenario import Scenario
from sim.config.overrides import with_values


def option_grid(scenario: Scenario, pool: str) -> list[dict]:
    cfg = scenario.pools[pool]
    opts = cfg.sizing
    hardware = (opts.hardware if opts and opts.hardware else [cfg.hardware])
    tps = (opts.tp if opts and opts.tp else [cfg.tp])
    pps = (opts.pp if opts and opts.pp else [cfg.pp])
    dtypes = (opts.weight_dtype if opts and opts.weight_dtype else [cfg.weight_dtype])
    kv_dtypes = (opts.kv_dtype if opts and opts.kv_dtype else [cfg.kv_dtype])
    return [{"hardware": h, "tp": t, "pp": p, "weight_dtype": d, "kv_dtype": k}
            for h, t, p, d, k in itertools.product(hardware, tps, pps, dtypes, kv_dtypes)]


# what one sizing option sets of a pool: every one of them named in each row of the size
# table and written by --write-scenario (a field left out would be the pool's own, unseen)
OPTION_FIELDS = ("hardware", "tp", "pp", "weight_dtype", "kv_dtype")


def configured_option(cfg) -> dict:
    """A pool's own option (its hardware, TP, pipeline stages, weight and KV cache
    precisions) as sizing names one."""
    return {k: getattr(cfg, k) for k in OPTION_FIELDS}


def option_source(scenario: Scenario, pool: str, option: dict) -> dict:
    """What a row of ``option`` names besides the option: the pool's serving engine and
    the step-time source its trials read (``cost_model``: roofline, or the measured or
    calibrated profile file, as the run's summary labels it; None where the option does
    not resolve, e.g. the model does not fit)."""
    from sim.config.inputs import scenario_files
    from sim.cost import build_cost_model

    label = None
    try:
        resolved, problems = resolve(with_values(scenario, {f"pools.{pool}.{k}": v
                                                            for k, v in option.items()}))
        if resolved is not None and not problems:
            label = build_cost_model(resolved.pools[pool], scenario_files(scenario)).label
    except (sim.ScenarioError, ValueError):
        pass
    return {"engine": scenario.pools[pool].engine, "cost_model": label}


def option_gpus(option: dict) -> int:
    """GPUs of one replica of ``option``: tp for each of its pp stages."""
    return option["tp"] * option.get("pp", 1)


def option_values(scenario: Scenario, pool: str, option: dict, replicas: int) -> dict:
    """The overrides that give ``pool`` the sizing ``option`` with a fixed ``replicas``: no
    autoscaler, and so no cold start; a spot pool's count is held by a one-row schedule,
    which replaces the replicas preemptions take (a fixed spot pool would lose them for
    good). The option sets exactly its fields (:data:`OPTION_FIELDS`): the KV cache's
    precision is the option's own, never inferred from the weights'."""
    values = {f"pools.{pool}.{k}": v for k, v in option.items()}
    cfg = scenario.pools[pool]
    values[f"pools.{pool}.replicas"] = replicas
    if cfg.spot is not None and cfg.spot.preemptions_per_hour > 0:
        values[f"pools.{pool}.autoscaler"] = {"type": "scheduled",
                                              "table": [{"at": 0, "replicas": replicas}]}
    else:
        values[f"pools.{pool}.autoscaler"] = None
        values[f"pools.{pool}.cold_start"] = type(cfg.cold_start)().model_dump(mode="json")
    return values
