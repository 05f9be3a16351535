"""Engine presets: the per-request front end, the default KV admission, whose kernels, the
shipped preset file. The timing rules on hand-worked schedules are in
tests/core/test_theory_engine_timing.py."""
from __future__ import annotations

import numpy as np
import pytest

import sim
from sim.config import profiles
from sim.config import engines
from tests.simfactories import continuous, make_pool, make_scenario, poisson_stream, trace_stream


def _one_request(tmp_path, **pool):
    stream = trace_stream(tmp_path / "one.csv", [(0.0, 512, 32)])
    return sim.run(make_scenario(stream=stream, pool=make_pool(**pool), duration=1.0))


def test_the_engine_front_end_adds_its_time_per_prompt_token_and_hop_to_ttft_and_e2e_only(
        tmp_path):
    """vllm@async's front end: 4 ms + 1.4 us per prompt token on the way in, 1 ms hop of
    the tokens on the way out; TPOT does not move."""
    base = _one_request(tmp_path, front_end=0, engine="vllm").requests.iloc[0]
    vllm = _one_request(tmp_path, front_end=None, engine="vllm").requests.iloc[0]
    extra = 4e-3 + 1.4e-6 * 512 + 1e-3
    assert vllm.ttft_s == pytest.approx(base.ttft_s + extra, abs=1e-9)
    assert vllm.e2e_s == pytest.approx(base.e2e_s + extra, abs=1e-9)
    assert vllm.tpot_s == pytest.approx(base.tpot_s, abs=1e-12)


def test_a_pool_front_end_overrides_the_engines_whole_front_end(tmp_path):
    base = _one_request(tmp_path, front_end=0).requests.iloc[0]
    own = _one_request(tmp_path, front_end=0.25).requests.iloc[0]
    assert own.ttft_s == pytest.approx(base.ttft_s + 0.25, abs=1e-9)
    preset = engines.resolve("trtllm@cpp")
    assert engines.front_end(preset, 0.01) == engines.FrontEnd(0.01)
    assert engines.front_end(preset, None, measured_on_engine=True) == engines.FrontEnd()
    assert engines.front_end(preset).entry_s(1000) == pytest.approx(4e-3 + 1.4e-3)


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
    from sim.config.overrides import with_values
    on_demand = _max_running(_kv_tight("vllm"))
    no_evict = _max_running(_kv_tight("vllm", kv_admission="guaranteed_no_evict"))
    assert no_evict < on_demand
    assert _max_running(_kv_tight("trtllm")) == no_evict
    # SGLang admits against an estimate of the running requests' output to come
    sglang = _max_running(_kv_tight("sglang"))
    assert sglang < _max_running(_kv_tight("sglang", kv_admission="on_demand"))
    assert sglang == _max_running(_kv_tight("sglang", kv_admission="estimated_output"))
    assert _max_running(_kv_tight("trtllm", kv_admission="on_demand")) == on_demand
    # an engine set by an override (fleetsim run --set, sweeps) brings its admission too
    swapped = with_values(_kv_tight("vllm"), {"pools.p.engine": "trtllm"})
    assert _max_running(swapped) == no_evict
    assert {v.kv_admission.value for e in engines.shipped().values()
            for v in e.versions.values()} == {"on_demand", "guaranteed_no_evict",
                                              "estimated_output"}


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

    assert (ttfts(served) == ttfts(served, front_end=0)).all()
    prompt = 64
    assert np.allclose(ttfts(plain) - ttfts(plain, front_end=0), 4e-3 + 1.4e-6 * prompt + 1e-3)
    assert np.allclose(ttfts(served, front_end=0.5) - ttfts(served), 0.5)


def test_requests_in_the_front_end_count_as_in_flight_for_the_autoscaler():
    import simpy
    from sim.config.resolve import resolve
    from sim.core.fleet import pool_parts
    from sim.core.pool import Pool
    from sim.recording.recorder import Recorder
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


def test_every_shipped_engine_version_reads_and_each_engine_has_its_default():
    shipped = engines.shipped()
    assert {name: set(e.versions) for name, e in shipped.items()} == {
        "vllm": {"v0", "v0-multistep", "v1", "async"}, "sglang": {"overlap"},
        "trtllm": {"pytorch", "cpp"}}
    assert {name: e.default for name, e in shipped.items()} == {
        "vllm": "async", "sglang": "overlap", "trtllm": "pytorch"}
    assert engines.resolve("vllm").label == "vllm@async"
    assert engines.resolve("vllm@v0-multistep").multi_step == 10


def test_a_preset_file_with_a_value_without_a_source_is_refused_at_its_line(tmp_path):
    """The shipped file's form, with one value's source removed: refused, naming the file,
    the line and the field."""
    from sim.config.errors import ScenarioError
    from sim.config.paths import data_dir
    text = (data_dir("profiles") / engines.ENGINES_FILE).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "host_per_seq_s: {value: 3.56e-6" in line)
    lines[at] = "        host_per_seq_s: {value: 3.56e-6}\n"
    path = tmp_path / "engines.yaml"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ScenarioError) as exc:
        engines.load_presets(path)
    text = str(exc.value)
    assert f"{path}:{at + 1}:" in text, text
    assert "engines.vllm.versions.v1.host_per_seq_s.source" in text, text


def test_summary_and_report_name_each_pools_engine_version(tmp_path):
    from sim.output.pages.report import build_report
    res = sim.run(make_scenario(stream=poisson_stream(rate=2.0, prompt_tokens=64,
                                                      output_tokens=8),
                                pool=make_pool(engine="vllm@v0"), duration=2.0))
    assert res.summary["pools"]["p"]["engine"] == "vllm@v0"
    html = build_report(res)
    assert "<th>engine</th>" in html and "pool p: engine vllm@v0, step times" in html
