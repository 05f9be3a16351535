"""fleetsim: a discrete-event capacity planner for LLM serving fleets.

    import sim
    scenario = sim.load_scenario("scenarios/quickstart.yaml")
    results = sim.run(scenario)
    results.requests      # one row per request (pandas)
    results.timeseries    # one row per pool per sample
    results.summary       # what summary.json holds
"""
from sim.api import load_scenario, run, with_overrides
from sim.config.errors import ScenarioError
from sim.output.results import Results

__all__ = ["load_scenario", "run", "with_overrides", "Results", "ScenarioError"]
__version__ = "0.1.0"
