"""Engine presets: the per-request front end, the default KV admission, whose kernels."""
from __future__ import annotations

import numpy as np
import pytest

import sim
from sim.config import profiles
from sim.config.engines import PRESETS, front_end_s
from tests.simfactories import continuous, make_pool, make_scenario, poisson_stream, trace_stream


def _one_request(tmp_path, **pool):
    stream = trace_stream(tmp_path / "one.csv", [(0.0, 512, 32)])
    return sim.run(make_scenario(stream=stream, pool=make_pool(**pool), duration=1.0))


def test_the_vllm_front_end_adds_its_time_to_ttft_and_e2e_only(tmp_path):
    layers = profiles.find_model("llama-3.1-8b").num_layers
    base = _one_request(tmp_path, front_end=0).requests.iloc[0]
    vllm = _one_request(tmp_path, front_end=None, engine="vllm").requests.iloc[0]
    extra = 0.8e-3 * layers
    assert vllm.ttft_s == pytest.approx(base.ttft_s + extra, abs=1e-9)
    assert vllm.e2e_s == pytest.approx(base.e2e_s + extra, abs=1e-9)
    assert vllm.tpot_s == pytest.approx(base.tpot_s, abs=1e-12)


def test_a_pool_front_end_overrides_the_engine_and_sglang_has_none(tmp_path):
    base = _one_request(tmp_path, front_end=0).requests.iloc[0]
    own = _one_request(tmp_path, front_end=0.25).requests.iloc[0]
    sglang = _one_request(tmp_path, front_end=None, engine="sglang").requests.iloc[0]
    assert own.ttft_s == pytest.approx(base.ttft_s + 0.25, abs=1e-9)
    assert sglang.ttft_s == pytest.approx(base.ttft_s, abs=1e-12)
    assert front_end_s("trtllm", 80) == 0.0
    assert front_end_s("vllm", 80) == pytest.approx(0.064)
    assert front_end_s("vllm", 80, 0.01) == 0.01


def test_a_request_still_in_the_front_end_when_the_run_stops_ends_unfinished(tmp_path):
    stream = trace_stream(tmp_path / "one.csv", [(0.0, 64, 4), (0.5, 64, 4)])
    res = sim.run(make_scenario(stream=stream, pool=make_pool(front_end=5.0), duration=1.0,
                                drain=2.0))
    status = res.requests["status"].astype(str).tolist()
    assert status == ["unfinished", "unfinished"]       # none lost, none served


def _kv_tight(engine: str, **sched):
    """Long answers into a small cache: on_demand admits more than can finish."""
    pool = make_pool(engine=engine, kv_cache_bytes="1GiB", scheduler=continuous(**sched))
    return make_scenario(stream=poisson_stream(rate=40.0, prompt_tokens=512,
                                               output_tokens=1500), pool=pool, duration=20.0)


def _max_running(scn) -> int:
    return sim.run(scn).summary["pools"]["p"]["max_running_seqs"]


def test_trtllm_admits_only_what_can_finish_unless_the_scheduler_says_otherwise():
    from sim.planning.overrides import with_values
    on_demand = _max_running(_kv_tight("vllm"))
    no_evict = _max_running(_kv_tight("vllm", kv_admission="guaranteed_no_evict"))
    assert no_evict < on_demand
    assert _max_running(_kv_tight("trtllm")) == no_evict
    assert _max_running(_kv_tight("sglang")) == on_demand
    assert _max_running(_kv_tight("trtllm", kv_admission="on_demand")) == on_demand
    # an engine set by an override (fleetsim run --set, sweeps) brings its admission too
    swapped = with_values(_kv_tight("vllm"), {"pools.p.engine": "trtllm"})
    assert _max_running(swapped) == no_evict
    assert {p.kv_admission for p in PRESETS.values()} == {"on_demand", "guaranteed_no_evict"}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_default_cost_model_reads_the_engines_own_measured_kernels(engine):
    res = sim.run(make_scenario(
        stream=poisson_stream(rate=2.0, prompt_tokens=256, output_tokens=16),
        pool={"model": "llama-3.1-8b", "hardware": "H100-SXM", "engine": engine},
        duration=5.0))
    label = res.summary["pools"]["p"]["cost_model"]
    assert f"gpu/h100-sxm/{engine}/llama-3.1-8b-tp1-bf16.yaml" in label


def test_engines_measured_kernels_differ():
    """Each engine's profile holds its own kernels: the same step costs differently."""
    from sim.cost.measured import AutoConfig, build
    model, hw = profiles.find_model("llama-3.1-70b"), profiles.find_hardware("H100-SXM")
    steps = {e: build(model, hw, 4, "bf16", "bf16", AutoConfig(), e).step_scalar(
        512.0, 64.0, 0.0, 64 * 1000.0)[0] for e in ("vllm", "sglang", "trtllm")}
    assert len({round(t, 9) for t in steps.values()}) == 3


def test_an_unknown_engine_is_refused_naming_the_choices(tmp_path):
    from sim.cli import main
    path = tmp_path / "s.yaml"
    path.write_text("duration: 10\nworkload:\n  streams:\n    s:\n      model: llama-3.1-8b\n"
                    "      arrival: {type: poisson, rate: 1}\n      prompt_tokens: 10\n"
                    "      output_tokens: 10\npools:\n  p:\n    model: llama-3.1-8b\n"
                    "    hardware: H100-SXM\n    engine: tgi\n")
    with pytest.raises(SystemExit) as exc:
        main(["check", str(path)])
    assert exc.value.code == 2


def test_a_profile_measured_on_a_whole_engine_already_holds_its_front_end(tmp_path):
    """A profile whose engine terms were fitted on a served engine (``fleetsim validate``
    writes them) holds that engine's own front end: none is added unless the pool names
    one. Without engine terms the engine's default applies."""
    from pathlib import Path

    import yaml
    root = Path(__file__).resolve().parents[2]
    base = yaml.safe_load((root / "profiles" / "calibrated" / "cpu" / "tiny-llama.yaml")
                          .read_text())
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(base))
    served = tmp_path / "served.yaml"
    served.write_text(yaml.safe_dump({**base, "engine": {"name": "transformers",
                                                         "constant_s": 0.0}}))

    def ttfts(profile, **extra):
        stream = trace_stream(tmp_path / "t.csv", [(0.0, 64, 4), (1.0, 64, 4)])
        extra.setdefault("front_end", None)
        pool = make_pool(model="tiny-llama", hardware="cpu", weight_dtype=base["dtype"],
                         kv_dtype=base.get("kv_dtype", base["dtype"]),
                         cost_model={"type": "calibrated", "profile": str(profile)}, **extra)
        return sim.run(make_scenario(stream=stream, pool=pool, duration=2.0)).requests.ttft_s

    layers = profiles.find_model("tiny-llama").num_layers
    assert (ttfts(served) == ttfts(served, front_end=0)).all()
    assert np.allclose(ttfts(plain) - ttfts(plain, front_end=0), 0.8e-3 * layers)
    assert np.allclose(ttfts(served, front_end=0.5) - ttfts(served), 0.5)


def test_requests_in_the_front_end_count_as_in_flight_for_the_autoscaler():
    import simpy
    from sim.config.resolve import resolve
    from sim.core.fleet import pool_parts
    from sim.core.pool import Pool
    from sim.output.recorder import Recorder
    from tests.simfactories import make_request
    scn = make_scenario(pool=make_pool(front_end=1.0))
    resolved, problems = resolve(scn)
    assert not problems
    env = simpy.Environment()
    rng = np.random.default_rng(0)
    spec = resolved.pools["p"]
    pool = Pool(env, spec, pool_parts(spec, rng), Recorder(), lambda r: None,
                lambda r, why: None, lambda r: None, 1.0, rng)
    for i in range(3):
        pool.submit(make_request(request_id=i, pool="p"))
    assert pool.metrics()["inflight_per_replica"] == 3.0
    assert pool.metrics()["queue_per_replica"] == 0.0
    assert len(list(pool.open_requests())) == 3


def test_an_engine_under_cost_model_says_where_it_moved(tmp_path):
    import pydantic
    from sim.cost.measured import AutoConfig
    with pytest.raises(pydantic.ValidationError, match="write `engine:` under the pool"):
        AutoConfig.model_validate({"type": "auto", "engine": "vllm"})
