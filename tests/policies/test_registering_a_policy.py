"""A new policy is added by registering it with its family, from outside the package:
the scenario accepts its ``type:`` at once, the fleet builds it, and taking it out again
restores the scenario as it was."""
from __future__ import annotations

from typing import ClassVar, Literal

import pydantic
import pytest

import sim
from sim.autoscalers import AUTOSCALERS, FixedAutoscaler, FixedConfig
from sim.cost import COST_MODELS
from sim.autoscalers.base import AutoscalerConfigBase
from sim.config.common import StrictModel
from sim.config.scenario import Scenario
from sim.routers import ROUTERS
from sim.routers.base import Router
from sim.schedulers import SCHEDULERS
from sim.schedulers.base import SchedulerConfigBase
from sim.schedulers.static import StaticConfig, StaticScheduler

SCENARIO = {
    "name": "toy", "seed": 4, "duration": 20,
    "workload": {"streams": {"chat": {
        "model": "llama-3.1-8b", "arrival": {"type": "poisson", "rate": 3},
        "prompt_tokens": 200, "output_tokens": 20}}},
    "pools": {"main": {"model": "llama-3.1-8b", "hardware": "H100-SXM", "replicas": 3,
                       "router": {"type": "first_ready"},
                       "scheduler": {"type": "pairs"}}},
}


class FirstReadyConfig(StrictModel):
    type: Literal["first_ready"] = "first_ready"


class FirstReadyRouter(Router):
    """Every request to the first ready replica (with room)."""

    def __init__(self, cfg: FirstReadyConfig, rng=None) -> None:
        pass

    def pick(self, req, ready, has_room):
        if has_room is None:
            return ready[0]
        return self.first_with_room(iter(ready), has_room)


class PairsConfig(SchedulerConfigBase):
    type: Literal["pairs"] = "pairs"


class PairsScheduler(StaticScheduler):
    """Static batches of two, sent as soon as there is one."""

    def __init__(self, cfg: PairsConfig, **kwargs) -> None:
        super().__init__(StaticConfig(batch_size=2, batch_timeout=0.0), **kwargs)


@pytest.fixture
def toys():
    ROUTERS.register(FirstReadyConfig, FirstReadyRouter)
    SCHEDULERS.register(PairsConfig, PairsScheduler)
    try:
        yield
    finally:
        SCHEDULERS.unregister(PairsConfig)
        ROUTERS.unregister(FirstReadyConfig)


def test_a_registered_router_and_scheduler_run_in_a_scenario(toys):
    scenario = Scenario.model_validate(SCENARIO)
    results = sim.run(scenario)
    req = results.requests
    done = req[req["status"].astype(str) == "completed"]
    assert len(done) == len(req) > 40
    assert set(done["replica"]) == {int(req["replica"].min())}   # the first replica only
    pool = results.summary["pools"]["main"]
    assert pool["replicas_max"] == 3 and pool["max_running_seqs"] == 2   # batches of two


def test_taking_a_policy_out_restores_the_scenario(toys):
    Scenario.model_validate(SCENARIO)
    SCHEDULERS.unregister(PairsConfig)
    try:
        with pytest.raises(pydantic.ValidationError, match="pairs"):
            Scenario.model_validate(SCENARIO)
    finally:
        SCHEDULERS.register(PairsConfig, PairsScheduler)


def test_a_type_already_taken_is_refused():
    class Clash(StrictModel):
        type: Literal["round_robin"] = "round_robin"

    with pytest.raises(ValueError, match="router type 'round_robin' is taken"):
        ROUTERS.register(Clash, FirstReadyRouter)
    assert Clash not in ROUTERS


@pytest.mark.parametrize("family, base", [
    (SCHEDULERS, "SchedulerConfigBase"), (AUTOSCALERS, "AutoscalerConfigBase"),
    (COST_MODELS, "CostModelConfigBase")])
def test_a_policy_whose_config_does_not_extend_its_family_contract_is_refused(family, base):
    """A family's base config declares what callers may ask of a member (the models it
    needs, the checks it adds, whether engine terms apply, whether it starts replicas):
    a config that does not extend it is refused when registered, naming the base."""
    class Bare(StrictModel):
        type: Literal["bare"] = "bare"

    with pytest.raises(TypeError, match=f"extends .*{base}.*Bare does not"):
        family.register(Bare, object)
    assert Bare not in family


def test_the_checks_ask_a_registered_policy_its_contract_not_its_type(toys):
    """resolve asks the scheduler's own checks (its `problems` hook) and nothing by type
    name: a registered scheduler's problem is reported at its field, located."""
    class Fussy(SchedulerConfigBase):
        type: Literal["fussy"] = "fussy"
        patience: float = 1.0

        def problems(self, engine, duration_s):
            return [(("patience",), f"patience {self.patience:g} s under engine "
                                    f"{engine.name}, past the run's {duration_s:g} s")]

    SCHEDULERS.register(Fussy, PairsScheduler)
    try:
        scenario = Scenario.model_validate({**SCENARIO, "pools": {"main": {
            **SCENARIO["pools"]["main"], "scheduler": {"type": "fussy"}}}})
        from sim.config.resolve import resolve
        _, problems = resolve(scenario)
        assert problems == [(("pools", "main", "scheduler", "patience"),
                             "patience 1 s under engine vllm, past the run's 20 s")]
    finally:
        SCHEDULERS.unregister(Fussy)


class HoldConfig(AutoscalerConfigBase):
    """A registered autoscaler that never starts a replica (its own type name)."""
    type: Literal["hold"] = "hold"
    starts_replicas: ClassVar[bool] = False


@pytest.fixture
def hold():
    AUTOSCALERS.register(HoldConfig, lambda cfg: FixedAutoscaler(FixedConfig()))
    try:
        yield
    finally:
        AUTOSCALERS.unregister(HoldConfig)


def test_a_pool_whose_autoscaler_never_starts_replicas_is_of_fixed_size_to_its_callers(hold):
    """Callers ask the autoscaler's hook (starts_replicas), not its type's name: `check`
    records the configured replicas of a pool held by a registered policy that never
    starts one, and --peak gives the streams a lead as for a pool of fixed size."""
    from sim.config.slos import parse_slo
    from sim.planning.check import measure_scenario
    from sim.planning.peak import peak_windowed

    data = {**SCENARIO, "pools": {"main": {"model": "llama-3.1-8b", "hardware": "H100-SXM",
                                           "replicas": 2, "autoscaler": {"type": "hold"},
                                           "sizing": {"max_replicas": 4}}}}
    assert Scenario.model_validate(data).pools["main"].fixed_size
    assert not Scenario.model_validate({**data, "pools": {"main": {
        **data["pools"]["main"], "autoscaler": {"type": "scheduled", "table": [[0, 2]]}}}}
    ).pools["main"].fixed_size
    measured = measure_scenario("toy.yaml", [parse_slo("ttft_p99=2s")],
                                scenario=Scenario.model_validate(data))
    assert measured["pools"]["main"]["replicas"] == 2
    long = Scenario.model_validate({**data, "duration": 1000, "pools": {
        "main": {**data["pools"]["main"]}, "other": {**data["pools"]["main"]}}})
    cut, found = peak_windowed(long, 100.0, frozenset({"main"}))
    assert found["lead_s"] == 60.0
