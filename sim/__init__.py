"""fleetsim: a discrete-event capacity planner for LLM serving fleets.

    import sim
    scenario = sim.load_scenario("scenarios/quickstart.yaml")
    results = sim.run(scenario)
    results.requests      # one row per request (pandas)
    results.timeseries    # one row per pool per sample
    results.summary       # what summary.json holds
    results.write("results/quickstart")

``with_overrides`` changes fields by dotted path; ``size``, ``sweep``, ``compare`` and
``check`` are the planning commands (docs/python-api.md shows each).

The names below are imported on first use (``import sim`` itself costs nothing, so the
``fleetsim`` command can set itself up before pydantic builds the scenario's models).
"""
from __future__ import annotations

import importlib

from sim import version as _version

__all__ = ["load_scenario", "run", "with_overrides", "size", "sweep", "compare", "check",
           "Results", "ScenarioError"]
__version__ = _version.__version__       # one source: sim/version.py

_HOMES = {"load_scenario": "sim.api", "run": "sim.api", "with_overrides": "sim.api",
          "size": "sim.workflows", "sweep": "sim.workflows", "compare": "sim.workflows",
          "check": "sim.workflows",
          "Results": "sim.output.results", "ScenarioError": "sim.config.errors"}


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        try:                                  # a subpackage: sim.api, sim.config, ...
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module 'sim' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
