"""Step-time models, one per module, and the registry that builds a pool's.

* ``auto`` (:mod:`sim.cost.measured`): the shipped profile measured on the pool's
  model, GPU, TP and dtypes, else the roofline.
* ``roofline`` (:mod:`sim.cost.roofline`): datasheet peaks and fitted efficiencies.
* ``calibrated`` (:mod:`sim.cost.calibrated`): tables measured by ``fleetsim calibrate``.

Each config's builder takes the resolved pool (its model, hardware, TP, dtypes, engine)
and the scenario's folder (where a profile's relative path is tried first); a pool of
several pipeline stages (``pp``) wraps it in :mod:`sim.cost.pipeline`.
"""
from __future__ import annotations

from sim.cost.base import CostModel, CostModelConfigBase
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.measured import AutoConfig
from sim.cost.measured import build as build_measured
from sim.cost.pipeline import pipelined
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.config.policies import Family


def _auto(pool, base_dir=None) -> CostModel:
    cfg = pool.cfg
    return build_measured(pool.model, pool.hardware, cfg.tp, cfg.weight_dtype, cfg.kv_dtype,
                          cfg.cost_model, pool.engine.name)


def _roofline(pool, base_dir=None) -> CostModel:
    cfg = pool.cfg
    return RooflineCostModel(pool.model, pool.hardware, cfg.tp, cfg.weight_dtype,
                             cfg.kv_dtype, cfg.cost_model)


def _calibrated(pool, base_dir=None) -> CostModel:
    cfg = pool.cfg
    return CalibratedCostModel(pool.model, pool.hardware, cfg.tp, cfg.weight_dtype,
                               cfg.kv_dtype, cfg.cost_model, base_dir=base_dir)


COST_MODELS = Family("cost model", {AutoConfig: _auto, RooflineConfig: _roofline,
                                    CalibratedConfig: _calibrated},
                     base=CostModelConfigBase)
CostModelConfig = COST_MODELS.union()


def build_cost_model(pool, base_dir=None) -> CostModel:
    """The pool's step-time model. ``base_dir``: the scenario's folder, against which a
    calibrated profile's relative path is tried first (then the working directory,
    then the shipped profiles/); a :class:`~sim.config.inputs.DataFiles` also bounds where the
    profile may lie. Raises ValueError for a missing or mismatched profile. A pool of
    ``pp`` > 1 pipeline stages runs its stages around it (:mod:`sim.cost.pipeline`)."""
    cost = COST_MODELS.built_by(pool.cfg.cost_model)(pool, base_dir)
    return pipelined(cost, pool.model, pool.hardware, pool.cfg.tp, pool.cfg.pp)


__all__ = ["COST_MODELS", "CostModel", "CostModelConfig", "build_cost_model"]
