"""Schedule equivalence with the real vLLM engine, on runs recorded once and shipped.

``tests/data/vllm-recorded/<workload>/`` holds what ``fleetsim validate --engine vllm``
recorded when vLLM 0.32 (CPU build) served each scenario of ``scenarios/validate/vllm/``
(see the folder's README): the plan (engine settings, requests' lengths and arrival order)
and vLLM's log of every request and every step. fleetsim's scheduler, replayed on the
same arrivals one step at a time, must schedule at least 99% of the steps exactly as
vLLM did: the same requests, the same new tokens each, the same tokens computed before,
the same prefix-cache hits on admission and the same preemptions. None of this needs
vLLM or times anything.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.engines.vllm_cpu import engine as vllm_engine
from calibrate.engines.vllm_cpu import run_folder
from calibrate.engines.vllm_cpu import targets as vllm_report
from calibrate.engines.vllm_cpu import schedule as vllm_schedule

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "tests" / "data" / "vllm-recorded"
WORKLOADS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
SCENARIOS = ROOT / "scenarios" / "validate" / "vllm"


def served(name: str) -> vllm_schedule.ServeLog:
    folder = DATA / name
    return vllm_schedule.read(folder / vllm_engine.PLAN_NAME, vllm_engine.log_file(folder))


def test_every_workload_is_recorded():
    assert WORKLOADS == sorted(f"vllm-{p.stem}" for p in SCENARIOS.glob("*.yaml"))


@pytest.mark.parametrize("name", WORKLOADS)
def test_fleetsim_schedules_each_step_as_vllm_did(name):
    log = served(name)
    eq = vllm_schedule.compare(log.batches(), vllm_schedule.replay(log))
    assert eq.steps >= len(log.steps) > 100
    assert eq.share >= vllm_report.TARGET_SHARE, json.dumps(eq.to_json(), indent=1)[:4000]


def test_the_recordings_exercise_what_they_are_named_for():
    def total(name, field):
        return sum(int(r.get(field, 0)) for r in served(name).records)
    assert vllm_schedule.preemptions(served("vllm-preemption").batches()) > 0
    assert total("vllm-prefix-cache", "cached_tokens") > 0
    assert served("vllm-priority").settings.policy == "priority"
    assert len({r.priority for r in served("vllm-priority").requests.values()}) == 2
    long_steps = served("vllm-long-prompts").batches()
    # a prompt split across steps: computed before > 0 while still in its prompt
    assert any(0 < comp < served("vllm-long-prompts").requests[rid].prompt_tokens and new > 1
               for b in long_steps for rid, (new, comp) in b.seqs.items())


def test_a_different_schedule_is_caught_and_named():
    """The comparison can fail: vLLM's log with one step changed."""
    log = served("vllm-light")
    ours = vllm_schedule.replay(log)
    engine = log.batches()
    k = next(i for i, b in enumerate(engine) if len(b.seqs) >= 2)
    rid, (new, comp) = next(iter(engine[k].seqs.items()))
    engine[k] = vllm_schedule.StepBatch({**engine[k].seqs, rid: (new + 1, comp)},
                                        engine[k].from_waiting, engine[k].preempted)
    eq = vllm_schedule.compare(engine, ours)
    assert eq.identical == len(ours) - 1
    assert eq.kinds == {"new_tokens": 1} and eq.first["new_tokens"]["step"] == k


def test_without_the_whole_prompt_gate_the_preemption_run_diverges():
    """vLLM 0.32 admits a waiting request only when its whole prompt fits: fleetsim's
    older on-demand admission schedules the small-cache run differently."""
    log = served("vllm-preemption")
    gated = vllm_schedule.compare(log.batches(), vllm_schedule.replay(log))
    log.settings = dataclasses.replace(log.settings, kv_admission="on_demand")
    ungated = vllm_schedule.compare(log.batches(), vllm_schedule.replay(log))
    assert ungated.share < gated.share


def test_a_log_of_another_format_is_refused(tmp_path):
    plan = vllm_schedule.read_json(DATA / "vllm-light" / vllm_engine.PLAN_NAME)
    with pytest.raises(vllm_schedule.ServeLogError, match="not a vLLM serve log"):
        vllm_schedule.load(plan, {"format": "other"}, "x.json")
    with pytest.raises(vllm_schedule.ServeLogError, match="missing or malformed"):
        vllm_schedule.load({"engine": {}}, {"format": vllm_schedule.SERVE_FORMAT,
                                            "requests": [], "steps": []}, "x.json")


@pytest.mark.parametrize("edit, expect", [
    (lambda plan: plan["engine"].update(num_blocks=-5), "engine.num_blocks is -5"),
    (lambda plan: plan["engine"].update(max_num_batched_tokens=0),
     "engine.max_num_batched_tokens is 0"),
    (lambda plan: plan["engine"].update(policy="lifo"), "engine.policy is 'lifo'"),
    (lambda plan: plan["requests"][0].update(max_tokens=-1), "max_tokens -1"),
])
def test_a_plan_no_served_run_could_have_is_refused(edit, expect):
    folder = DATA / "vllm-light"
    plan = vllm_schedule.read_json(folder / vllm_engine.PLAN_NAME)
    log = vllm_schedule.read_json(vllm_engine.log_file(folder))
    vllm_schedule.load(plan, log, "x.json")
    edit(plan)
    with pytest.raises(vllm_schedule.ServeLogError, match=expect):
        vllm_schedule.load(plan, log, "x.json")


# -- planning a scenario for vLLM -----------------------------------------------------------
def test_a_plan_keeps_the_pools_limits_and_shares_prefix_token_ids():
    p = vllm_engine.plan(SCENARIOS / "prefix-cache.yaml").data
    assert p["engine"] == {"max_num_batched_tokens": 512, "max_num_seqs": 32,
                           "block_size": 32, "num_blocks": 1024, "chunked_prefill": True,
                           "prefix_caching": True, "policy": "fcfs",
                           "kv_admission": "whole_prompt", "max_model_len": 4096}
    by_group: dict[str, list[int]] = {}
    for r in p["requests"]:
        head = r["prompt"][:512]
        assert by_group.setdefault(r["prefix_group"], head) == head
        assert len(r["prompt"]) >= 512 + 4
    assert len(by_group) == 2 and len({tuple(v) for v in by_group.values()}) == 2
    assert vllm_engine.plan(SCENARIOS / "prefix-cache.yaml").data == p     # deterministic


def _scenario(tmp_path, **edits) -> Path:
    text = (SCENARIOS / "light.yaml").read_text(encoding="utf-8")
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _cli(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "sim", *argv], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("edit, expect", [
    ({"block_size: 32 ": "block_size: 16 "}, "block_size: vLLM's CPU attention takes block "
                                             "sizes that are multiples of 32"),
    ({"prompt_tokens: {type: lognormal, mean: 128, cv: 0.5, min: 8, max: 1024}":
      "prompt_tokens: {type: uniform, low: 8, high: 5000}"}, "more than the engine's 4096"),
    ({"kv_admission: whole_prompt": "kv_admission: guaranteed_no_evict"},
     "not 'guaranteed_no_evict'"),
    ({"weight_dtype: fp32": "weight_dtype: fp16", "kv_dtype: fp32": "kv_dtype: fp16",
      "    cost_model: {type: calibrated, profile: calibrated/cpu/tiny-llama.yaml}":
      "    cost_model: {type: roofline}"}, "serves fp32 or bf16"),
    ({"    cost_model: {type: calibrated, profile: calibrated/cpu/tiny-llama.yaml}":
      "    cost_model: {type: roofline}"}, "cost_model: the timing comparison fits"),
], ids=["block-size-16", "too-long", "no-evict", "fp16", "not-calibrated"])
def test_a_scenario_vllm_cannot_serve_is_refused_before_anything_runs(tmp_path, edit, expect):
    path = _scenario(tmp_path, **edit)
    # no vLLM to fall back on: a scenario the plan let through could not start serving
    res = _cli("validate", "--engine", "vllm", str(path), "--out", str(tmp_path / "o"),
               env={run_folder.VENV_ENV: str(tmp_path / "no-vllm")})
    assert res.returncode == 2, res.stderr
    assert expect in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists()


def test_a_missing_vllm_environment_names_the_fix(tmp_path):
    res = _cli("validate", "--engine", "vllm", str(SCENARIOS / "light.yaml"), "--out",
               str(tmp_path / "o"), env={run_folder.VENV_ENV: str(tmp_path / "nope")})
    assert res.returncode == 2
    assert "make vllm" in res.stderr and "Traceback" not in res.stderr


def test_validate_from_recorded_vllm_runs(tmp_path):
    """The re-analysis of the shipped runs gives the figures the served run wrote (the
    README's tables), and --strict fails exactly when one misses its target."""
    out = tmp_path / "o"
    res = _cli("validate", "--engine", "vllm", "--from-logs", str(DATA), "--out", str(out),
               "--strict")
    for name in WORKLOADS:
        assert f"| {name} |" in res.stdout
        assert (out / name / "equivalence.json").is_file()
    rows = json.loads((out / "equivalence.json").read_text(encoding="utf-8"))
    assert [r["workload"] for r in rows] == WORKLOADS
    missed = [m for r in rows for m in vllm_report.missed_targets(r)]
    assert res.returncode == (1 if missed else 0), res.stderr
    assert all(m in res.stderr for m in missed)
    served = json.loads((DATA / "equivalence.json").read_text(encoding="utf-8"))
    for now, then in zip(rows, served):
        assert now["workload"] == then["workload"]
        for key in ("steps", "identical", "mismatches", "vllm_preemptions",
                    "fleetsim_preemptions", "vllm_cached_tokens", "fleetsim_cached_tokens"):
            assert now[key] == then[key], (now["workload"], key)
        if "timing" in then:
            for part in ("measured", "predicted", "errors"):
                assert now["timing"][part] == pytest.approx(then["timing"][part], rel=1e-6,
                                                            nan_ok=True), part
    # the shipped runs were made on a steady machine: vLLM's workload steps ran at the
    # speed its calibration grid's fit gives them, and the report flags none
    assert all(0.9 <= r["timing"]["fit"]["workload_step_ratio"] <= 1.1 for r in rows)
    assert "not fit to publish" not in res.stdout
    bad = _cli("validate", "--engine", "vllm", "--from-logs", str(tmp_path / "missing"))
    assert bad.returncode == 2 and "not a folder of recorded vLLM runs" in bad.stderr


def test_a_recorded_run_s_errors_name_its_folder_not_the_output_folder(tmp_path, capsys):
    """The timing comparison reads a copy written into the output's temporary folder: its
    errors name the recorded run's folder, and its plan's scenario by field."""
    import gzip

    from sim.cli import main
    recorded = DATA / "vllm-light"
    plan = json.loads((recorded / vllm_engine.PLAN_NAME).read_text("utf-8"))
    log = json.loads(gzip.decompress((recorded / "vllm_log.json.gz").read_bytes()))
    bad_plan = json.loads(json.dumps(plan))
    next(iter(bad_plan["scenario_yaml"]["pools"].values()))["replicas"] = 0
    unfinished = json.loads(json.dumps(log))
    unfinished["requests"][0]["finish_s"] = None
    for name, plan_data, log_data in (("bad-plan", bad_plan, log),
                                      ("unfinished", plan, unfinished)):
        folder = tmp_path / name / "vllm-light"
        folder.mkdir(parents=True)
        (folder / vllm_engine.PLAN_NAME).write_text(json.dumps(plan_data), "utf-8")
        (folder / "vllm_log.json").write_text(json.dumps(log_data), "utf-8")
    for name, message in (("bad-plan", "plan.json: scenario_yaml.pools.engine.replicas: "
                                        "Input should be greater than 0"),
                          ("unfinished", ": vLLM left requests unfinished")):
        folder = tmp_path / name / "vllm-light"
        assert main(["validate", "--engine", "vllm", "--from-logs", str(tmp_path / name),
                     "--out", str(tmp_path / "o"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {folder}"), err
        assert message in err and ".tmp-" not in err, err
        assert not (tmp_path / "o").exists()


def test_the_report_names_the_rows_a_drifting_machine_timed(tmp_path):
    """A workload whose steps vLLM ran more than 10% slower (or faster) than the grid's fit
    gives them is named as measuring the machine; one within 10% is not."""
    served = json.loads((DATA / "equivalence.json").read_text(encoding="utf-8"))
    timed = [r for r in served if "timing" in r][:3]
    for row, ratio in zip(timed, (1.31, 0.95, 0.85)):
        row["timing"]["fit"]["workload_step_ratio"] = ratio
    text = vllm_report.write_report(timed, tmp_path)
    names = [r["workload"] for r in timed]
    note = next(line for line in text.splitlines() if "not fit to publish" in line)
    assert f"{names[0]} (workload steps x1.31 the fit)" in note
    assert f"{names[2]} (workload steps x0.85 the fit)" in note
    assert names[1] not in note
    assert "| x0.95 |" in text
