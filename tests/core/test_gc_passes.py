"""The simulation runs with fewer collector passes and gives the collector
back as it found it."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest

import sim
from sim.core.simulation import GC_YOUNG_THRESHOLD, fewer_gc_passes

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"


def test_fewer_gc_passes_raises_the_young_threshold_and_restores_it_even_on_error():
    before = gc.get_threshold()
    with fewer_gc_passes():
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > before[0]
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError):
        with fewer_gc_passes():
            raise RuntimeError("a run that fails")
    assert gc.get_threshold() == before


def test_a_run_leaves_the_collector_as_it_found_it():
    scenario = sim.load_scenario(QUICKSTART).model_copy(update={"duration": 5.0})
    before = gc.get_threshold()
    gc.set_threshold(500, 7, 9)
    try:
        results = sim.run(scenario)
        assert len(results.requests) > 0
        assert gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*before)
