"""Same scenario and seed, same bytes: summary.json and requests.parquet do not
depend on the process, on Python's string hashing, or on anything but the
scenario and its seed.

The scenario goes through every place where an accidental dependency could
hide: a gateway with API keys and several teams (rate limits, concurrency,
fair queueing, retries with jitter), two pools behind a weighted split,
prefix caching with several prefix groups, and the ``power_of_two`` (random
choices) and ``prefix_affinity`` (hashing of prefix names) routers.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim.output.files.outputs import write_outputs

ROOT = Path(__file__).resolve().parent.parent
COMPARED = ("summary.json", "requests.parquet", "report.html")

SCENARIO = """\
name: determinism
seed: 11
duration: 20s
drain: 2min
sample_interval: 1s
workload:
  streams:
    assistant:
      api_key: key-support
      model: chat
      arrival: {type: poisson, rate: 12/s}
      prefix: {tokens: 400, groups: 4}
      prompt_tokens: {type: lognormal, mean: 200, cv: 1.0, max: 1500}
      output_tokens: {type: lognormal, mean: 80, cv: 1.0, max: 400}
      retry: {max_attempts: 3, base: 200ms, max_delay: 2s, jitter: full}
    search:
      api_key: key-search
      model: chat
      priority: 1
      arrival: {type: gamma, rate: 6/s, cv: 2}
      prefix: {tokens: 128, groups: 2}
      prompt_tokens: {type: uniform, low: 50, high: 900}
      output_tokens: {type: exponential, mean: 60, max: 300}
      retry: {max_attempts: 2, base: 500ms, max_delay: 2s, jitter: equal}
    analytics:
      api_key: key-analytics
      model: chat
      priority: 2
      arrival: {type: poisson, rate: 3/s}
      prompt_tokens: {type: fixed, value: 1200}
      output_tokens: {type: uniform, low: 10, high: 200}
    intruder:
      api_key: stolen
      model: chat
      arrival: {type: poisson, rate: 1/s}
      prompt_tokens: 100
      output_tokens: 10
gateway:
  keys:
    key-support: {team: support}
    key-search: {team: search}
    key-analytics: {team: analytics}
  teams:
    support: {requests_per_min: 120, max_concurrency: 24, weight: 2}
    search: {tokens_per_min: 400000, max_priority: 1}
    analytics: {requests_per_min: 120, max_concurrency: 2, weight: 0.5}
  models:
    llama-3.1-8b@1: {pools: {affinity: 2.0, random: 1.0}}
  aliases:
    chat: llama-3.1-8b@1
pools:
  affinity:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 3
    kv_cache_bytes: 1GB
    router: {type: prefix_affinity}
    queue: {fair: true, capacity: 200, max_outstanding_per_replica: 24}
    scheduler: {type: continuous, max_num_batched_tokens: 2048, max_num_seqs: 64}
  random:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 2
    kv_cache_bytes: 512MB
    router: {type: power_of_two}
    queue: {fair: true, max_outstanding_per_replica: 16}
    scheduler: {type: continuous, max_num_batched_tokens: 1024, max_num_seqs: 32,
                policy: priority}
"""

# Loads the scenario, optionally overrides the seed, writes the outputs (no PNGs: they
# are drawn only when asked for).
CHILD = """\
import sys
import sim
from sim.output.files.outputs import write_outputs
scenario = sim.load_scenario(sys.argv[1])
if len(sys.argv) > 3:
    scenario = sim.with_overrides(scenario, seed=int(sys.argv[3]))
write_outputs(sim.run(scenario), sys.argv[2])
"""


@pytest.fixture(scope="module")
def scenario_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("determinism") / "determinism.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture(scope="module")
def reference(scenario_path, tmp_path_factory) -> dict[str, bytes]:
    """The outputs of one in-process run."""
    out = tmp_path_factory.mktemp("reference") / "out"
    write_outputs(sim.run(sim.load_scenario(scenario_path)), out)
    return _read(out)


def _read(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in COMPARED}


def _in_subprocess(scenario_path: Path, out: Path, hash_seed: str | None,
                   seed: int | None = None) -> dict[str, bytes]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    args = [sys.executable, "-c", CHILD, str(scenario_path), str(out)]
    if seed is not None:
        args.append(str(seed))
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return _read(out)


def _assert_same(a: dict[str, bytes], b: dict[str, bytes]) -> None:
    for name in COMPARED:
        if a[name] != b[name]:
            first = next(i for i, (x, y) in enumerate(zip(a[name], b[name])) if x != y) \
                if len(a[name]) == len(b[name]) else min(len(a[name]), len(b[name]))
            pytest.fail(f"{name} differs from byte {first}: "
                        f"{a[name][max(0, first - 80):first + 80]!r} vs "
                        f"{b[name][max(0, first - 80):first + 80]!r}")


def test_the_scenario_exercises_what_it_is_meant_to(reference):
    """Several teams, rejections at the gateway, retries, prefix hits, both pools."""
    import io

    import pandas as pd
    req = pd.read_parquet(io.BytesIO(reference["requests.parquet"]))
    assert set(req["team"]) >= {"support", "search", "analytics"}
    assert set(req["pool"]) >= {"affinity", "random"}
    assert (req["reject_reason"] == "unauthorized").any()
    assert (req["attempts"] > 1).any()
    assert (req["reject_reason"] == "concurrency_limit").any()
    assert (req["cached_prompt_tokens"] > 0).any()
    assert (req["status"] == "completed").sum() > 100


def test_two_runs_in_one_process_are_identical(scenario_path, reference, tmp_path):
    scenario = sim.load_scenario(scenario_path)
    write_outputs(sim.run(scenario), tmp_path / "again")
    _assert_same(reference, _read(tmp_path / "again"))


def test_a_run_does_not_change_the_scenario(scenario_path, tmp_path):
    """Running a loaded scenario twice (the same object) gives the same bytes."""
    scenario = sim.load_scenario(scenario_path)
    write_outputs(sim.run(scenario), tmp_path / "a")
    write_outputs(sim.run(scenario), tmp_path / "b")
    _assert_same(_read(tmp_path / "a"), _read(tmp_path / "b"))


def test_separate_processes_are_identical(scenario_path, reference, tmp_path):
    first = _in_subprocess(scenario_path, tmp_path / "p1", hash_seed=None)
    second = _in_subprocess(scenario_path, tmp_path / "p2", hash_seed=None)
    _assert_same(first, second)
    _assert_same(reference, first)


def test_string_hashing_does_not_matter(scenario_path, reference, tmp_path):
    """PYTHONHASHSEED changes hash() of every string; the outputs must not change."""
    zero = _in_subprocess(scenario_path, tmp_path / "h0", hash_seed="0")
    other = _in_subprocess(scenario_path, tmp_path / "h12345", hash_seed="12345")
    _assert_same(zero, other)
    _assert_same(reference, zero)


def test_a_different_seed_gives_different_requests(scenario_path, reference, tmp_path):
    other = _in_subprocess(scenario_path, tmp_path / "seed12", hash_seed="0", seed=12)
    assert other["requests.parquet"] != reference["requests.parquet"]
    assert other["summary.json"] != reference["summary.json"]


def test_overriding_the_seed_with_its_own_value_changes_nothing(scenario_path, reference,
                                                                tmp_path):
    scenario = sim.with_overrides(sim.load_scenario(scenario_path), seed=11)
    write_outputs(sim.run(scenario), tmp_path / "same")
    _assert_same(reference, _read(tmp_path / "same"))
