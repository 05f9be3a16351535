"""A saturated row of the GPU validation table, checked by capacity on a fleet whose
capacity is known in closed form."""
from __future__ import annotations

import pytest
import yaml

from calibrate import cli
from calibrate.validate import published as vg
from calibrate.validate.capacity import binding, published_binding

from tests.planning.test_planning import service_time_s

OUTPUT_TOKENS = 64


def _row(tmp_path, load: float, bounds: dict[str, str]) -> vg.Row:
    """One server serving one request at a time (the single scheduler, no front end),
    each in S = a 256-token prefill then 63 decode steps, fed evenly spaced requests at
    ``load`` / S: none ever waits below 1 / S, and the queue grows without end above it,
    so the fleet's capacity is 1 / S whatever the latency bounds, and the capacity ratio
    of a row published at ``load`` / S is 1 / ``load``."""
    s = service_time_s()
    scenario = {
        "name": "known", "seed": 1, "duration": f"{300 * s}s", "warmup": f"{20 * s}s",
        "drain": f"{3000 * s}s",
        "workload": {"streams": {"q": {
            "model": "llama-3.1-8b", "arrival": {"type": "gamma", "rate": load / s, "cv": 0.001},
            "prompt_tokens": 256, "output_tokens": OUTPUT_TOKENS}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM",
                        "scheduler": {"type": "single"},
                        # service time S: the roofline's own host terms, added (a
                        # synchronous engine), no front end
                        "cost_model": {"type": "roofline", "step_overhead": 1e-3},
                        "engine": "vllm@v1", "front_end": 0}}}
    (tmp_path / "known.yaml").write_text(yaml.safe_dump(scenario))
    table = tmp_path / "published.yaml"
    # published: TTFT p99 near its bound, TPOT p99 far from it (the TTFT bound binds)
    table.write_text(yaml.safe_dump({"rows": [{
        "name": "known", "scenario": "known.yaml", "source": "made up", "setting": "one",
        "kind": "server", "load": "high",
        "published": {"ttft_p99_ms": 1.9 * s * 1e3, "tpot_p99_ms": s / 10 * 1e3},
        "saturated": {"bounds": bounds, "bounds_source": "made up"}}]}))
    row, = vg.read_table(table)
    return row


@pytest.mark.parametrize("load", [0.9, 1.25])
def test_the_capacity_ratio_is_the_fleets_capacity_over_the_published_rate(tmp_path, load):
    """At 0.9 / S the fleet meets a TTFT p99 bound of 2 S (no request waits) and its
    capacity ratio is 1 / 0.9 = 1.11; at 1.25 / S its queue runs away, it misses the bound
    and the ratio is 0.8. A TPOT bound it always meets never binds: the TTFT bound does,
    as on the published side; the figures at the simulated capacity are read there."""
    s = service_time_s()
    row = _row(tmp_path, load, {"ttft_p99": f"{2 * s * 1e3:.6f}ms",
                                "tpot_p99": f"{s / 5 * 1e3:.6f}ms"})
    sat = vg.run_row(row, None)["saturated"]
    assert sat["at_published"]["meets"] is (load < 1)
    assert sat["capacity"] == "found"
    assert sat["capacity_ratio"] == pytest.approx(1 / load, rel=0.03)
    assert sat["capacity_ratio"] <= 1 / load * 1.01      # the largest rate found within
    assert sat["binding"] == "ttft_p99" and sat["published_binding"] == "ttft_p99"
    assert sat["runs"] <= 8
    at = sat["at_capacity"]
    assert at["rate_scale"] == sat["capacity_ratio"]
    decode_s = at["predicted"]["tpot_p99_ms"] / 1e3
    assert 0 < decode_s < s / (OUTPUT_TOKENS - 1)      # TPOT: the decode steps alone
    assert at["error"]["tpot_p99_ms"] == pytest.approx(decode_s / (s / 10) - 1)
    assert sat["bounds_source"] == "made up"


def test_a_fleet_within_its_bounds_past_twice_the_rate_gives_a_bound_only(tmp_path):
    """At 0.3 / S the fleet meets the bounds at every rate the search may try (up to
    2x): the ratio is a lower bound, and its latencies are reported, not compared."""
    s = service_time_s()
    row = _row(tmp_path, 0.3, {"ttft_p99": f"{2 * s * 1e3:.6f}ms"})
    ran = vg.run_row(row, None)
    sat = ran["saturated"]
    assert sat["capacity"] == "above" and sat["at_published"]["meets"]
    assert 1.9 < sat["capacity_ratio"] <= 2.0
    assert sat["at_capacity"] is None and sat["binding"] == "ttft_p99"
    h = vg.headline([ran])["saturated"]
    assert h["reported_only"] == ["known"] and h["in_range"] == 0


def test_the_binding_bound_is_the_one_with_least_margin():
    bounds = {"ttft_p99": 2.0, "tpot_p99": 0.2}
    assert binding({"ttft_p99": 0.5, "tpot_p99": 0.15}, bounds) == "tpot_p99"
    assert binding({"ttft_p99": float("inf"), "tpot_p99": 0.3}, bounds) == "ttft_p99"
    assert published_binding({"ttft_p99_ms": 1911.0, "tpot_p99_ms": 25.1},
                             {"ttft_p99": 2.0, "tpot_p99": 0.1}) == "ttft_p99"
    assert published_binding({"ttft_p50_ms": 1.0}, bounds) is None


def test_a_saturated_row_whose_scenario_has_two_pools_is_refused_before_any_run(
        tmp_path, capsys):
    """The search scales one pool's load: a saturated row naming a scenario of two pools
    is refused, naming the row, before any row runs."""
    row = _row(tmp_path, 0.9, {"ttft_p99": "1s"})
    data = yaml.safe_load(row.scenario.read_text())
    data["pools"]["other"] = dict(data["pools"]["p"])
    data["workload"]["streams"]["q"]["pool"] = "p"
    row.scenario.write_text(yaml.safe_dump(data))
    assert cli.main(["validate-gpu", "--table", str(tmp_path / "published.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"row known: {row.scenario}: pools: " in err
    assert "names one pool" in err and "names 2: other, p" in err
