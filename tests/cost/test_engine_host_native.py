"""A measured-kernel model prices an engine's host time in its own step arithmetic
(``CalibratedCostModel.with_engine_host``); it must give what the general wrapper
(``EngineHostCost``) gives, on every path the simulator takes: one step, an array of
steps and a fast-forwarded decode run."""
from __future__ import annotations

import numpy as np
import pytest

from sim.config import profiles
from sim.config.paths import data_dir
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.profile_file import load_profile
from sim.cost.engine_host import EngineHostCost
from sim.cost.shape import BatchShape


def _shipped(name: str) -> CalibratedCostModel:
    path = data_dir("profiles") / "calibrated" / "gpu" / "h100-sxm" / "vllm" / name
    data = load_profile(path)
    return CalibratedCostModel(profiles.find_model(data["model"]["name"]),
                               profiles.find_hardware(data["device_name"]), data["tp"],
                               data["dtype"], data["kv_dtype"],
                               CalibratedConfig(profile=str(path)))


def _a_profile() -> str:
    return "llama-3.1-8b-tp1-fp8.yaml"


@pytest.mark.parametrize("overlap", [False, True])
# a host time hidden under every step, one longer than small steps, one longer than all
@pytest.mark.parametrize("host_c_s, host_per_seq_s", [(2e-4, 1e-6), (4e-3, 2e-5), (0.2, 1e-3)])
def test_native_host_time_equals_the_wrapper(overlap, host_c_s, host_per_seq_s):
    base = _shipped(_a_profile())
    native = base.with_engine_host(host_c_s, host_per_seq_s, overlap)
    wrapped = EngineHostCost(_shipped(_a_profile()), host_c_s, host_per_seq_s, overlap)
    assert native.host_terms() == wrapped.host_terms()
    for args in [(1.0, 1.0, 0.0, 512.0), (64.0, 64.0, 0.0, 64 * 900.0),
                 (512.0, 3.0, 512.0 * 256, 2 * 1000.0), (2048.0, 1.0, 2048.0 * 1024, 0.0),
                 (256.0, 256.0, 0.0, 256 * 3000.0)]:
        got, want = native.step_scalar(*args), wrapped.step_scalar(*args)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), args
    shape = BatchShape(np.array([1.0, 64.0, 512.0]), np.array([1.0, 64.0, 3.0]),
                       np.array([0.0, 0.0, 512.0 * 256]), np.array([512.0, 64 * 900.0, 2000.0]))
    np.testing.assert_allclose(native.step_time_s(shape), wrapped.step_time_s(shape),
                               rtol=1e-12)
    for n, kv, steps in [(1, 100.0, 50), (64, 64 * 500.0, 300), (200, 0.0, 40)]:
        np.testing.assert_allclose(native.decode_run_s(n, kv, steps),
                                   wrapped.decode_run_s(n, kv, steps), rtol=1e-12)
        run_n, run_w = native.decode_run(n, kv, steps), wrapped.decode_run(n, kv, steps)
        assert run_n.duration_s == pytest.approx(run_w.duration_s, rel=1e-12)
    # the model it came from is untouched
    assert not base._host_overlap and base.host_terms() != native.host_terms()


def test_an_overlapped_step_lasts_the_longer_of_gpu_and_host():
    base = _shipped(_a_profile())
    own_c, own_s, _ = base.host_terms()
    gpu = base.step_scalar(8.0, 8.0, 0.0, 8 * 500.0)[0] - (own_c + own_s * 8)
    hidden = base.with_engine_host(gpu / 2, 0.0, overlap=True)
    exposed = base.with_engine_host(2 * gpu, 0.0, overlap=True)
    added = base.with_engine_host(gpu / 2, 0.0, overlap=False)
    assert hidden.step_scalar(8.0, 8.0, 0.0, 8 * 500.0)[0] == pytest.approx(gpu, rel=1e-12)
    assert exposed.step_scalar(8.0, 8.0, 0.0, 8 * 500.0)[0] == pytest.approx(2 * gpu, rel=1e-12)
    assert added.step_scalar(8.0, 8.0, 0.0, 8 * 500.0)[0] == pytest.approx(1.5 * gpu, rel=1e-12)
