"""vLLM V1's host time per step (calibrate.engines.vllm_cpu.host): the fit on recorded logs, without
vLLM and without timing anything."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from calibrate import cli
from calibrate.engines.vllm_cpu import host as vllm_host
from sim.config.errors import ScenarioError

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm-host"
SHIPPED_LOG = DATA / "vllm_host_log.jsonl"
SHIPPED_FIT = DATA / "vllm_host_fit.yaml"

HEADER = {"format": vllm_host.FORMAT, "version": vllm_host.VERSION, "vllm": "0.32.0",
          "cpu": "test CPU", "date": "2026-01-01"}


def write_log(path: Path, rows: list[dict], header: dict | None = None) -> Path:
    lines = [json.dumps(HEADER if header is None else header)]
    lines += [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def synthetic_rows(c0_s: float, c1_s: float, c2_s: float, reps: int = 3) -> list[dict]:
    """Steps over a grid whose every stage takes exactly c0 + c1*B + c2*prompt, except one
    outlier per grid point (the per-point median ignores it)."""
    rows = []
    for phase, decodes, prefill in [("decode", d, 0) for d in (1, 4, 16, 64, 256)] + \
            [("prefill", d, p) for d in (0, 8, 128) for p in (128, 2048)]:
        b = decodes + (1 if prefill else 0)
        t = c0_s + c1_s * b + c2_s * prefill
        for rep in range(reps):
            value = 10 * t if rep == 0 else t        # a stall on one repetition
            rows.append({"phase": phase, "rep": rep, "decodes": decodes, "prefill": prefill,
                         "B": b, "prompt_tokens": prefill,
                         **{c: value for c in vllm_host.COMPONENTS}})
    return rows


def within_rounding(value: float, shipped: float) -> bool:
    """``value`` rounds to ``shipped`` at the digits the YAML keeps (half a unit of the
    last, and a hair for floating point)."""
    if shipped == 0:
        return abs(value) < 1e-12
    unit = 10 ** (math.floor(math.log10(abs(shipped))) - (vllm_host.DIGITS - 1))
    return abs(value - shipped) <= 0.5 * unit * 1.001


def test_fit_on_the_shipped_log_reproduces_the_shipped_values():
    shipped = yaml.safe_load(SHIPPED_FIT.read_text(encoding="utf-8"))
    result = vllm_host.fit(vllm_host.read_log(SHIPPED_LOG))
    assert shipped["source"] == "tests/data/vllm-host/vllm_host_log.jsonl"
    assert set(shipped["components"]) == set(vllm_host.COMPONENTS)
    for c, f in result.components.items():
        for k, v in f.coeffs.items():
            assert within_rounding(v, shipped["components"][c][k]), (c, k, v)
    header = result.log.header
    assert (shipped["vllm"], shipped["cpu"], shipped["date"]) == \
        (header["vllm"], header["cpu"], header["date"])
    assert shipped["steps"] == len(result.log.rows)


def test_shipped_log_is_small_and_covers_the_grid():
    assert SHIPPED_LOG.stat().st_size < 300_000
    log = vllm_host.read_log(SHIPPED_LOG)
    batches = {r["B"] for r in log.rows if r["phase"] == "decode"}
    assert {1, 256} <= batches
    assert max(r["prompt_tokens"] for r in log.rows) >= 2048


def test_fit_recovers_known_coefficients_from_a_synthetic_log(tmp_path):
    c0_s, c1_s, c2_s = 2.5e-4, 3.0e-5, 8.0e-7
    path = write_log(tmp_path / "log.jsonl", synthetic_rows(c0_s, c1_s, c2_s))
    result = vllm_host.fit(vllm_host.read_log(path))
    for c in vllm_host.COMPONENTS:
        got = result.components[c].coeffs
        assert got["c0_s"] == pytest.approx(c0_s, rel=1e-6)
        assert got["c1_s_per_seq"] == pytest.approx(c1_s, rel=1e-6)
        assert got["c2_s_per_prompt_token"] == pytest.approx(c2_s, rel=1e-6)
        assert result.components[c].max_abs_residual_s < 1e-12


def test_fit_writes_the_values_with_the_log_as_source(tmp_path):
    path = write_log(tmp_path / "log.jsonl", synthetic_rows(1e-4, 2e-5, 5e-7))
    out = vllm_host.write_yaml(vllm_host.fit(vllm_host.read_log(path)), tmp_path / "f.yaml")
    data = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert data["source"] == str(path.resolve())
    assert data["components"]["step_s"]["c1_s_per_seq"] == 2e-5


def test_a_step_missing_a_field_is_an_error_naming_file_line_and_field(tmp_path):
    rows = synthetic_rows(1e-4, 2e-5, 5e-7)
    del rows[4]["update_s"]
    path = write_log(tmp_path / "log.jsonl", rows)
    with pytest.raises(ScenarioError) as err:
        vllm_host.read_log(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 6, "update_s")
    assert "schedule_s" in err.value.message          # the fields a step line has


def test_a_header_missing_a_field_is_an_error(tmp_path):
    header = {k: v for k, v in HEADER.items() if k != "cpu"}
    path = write_log(tmp_path / "log.jsonl", synthetic_rows(1e-4, 2e-5, 5e-7), header)
    with pytest.raises(ScenarioError) as err:
        vllm_host.read_log(path)
    assert (err.value.line, err.value.field) == (1, "cpu")


def test_fit_command_exits_2_with_the_located_error(tmp_path, capsys):
    rows = synthetic_rows(1e-4, 2e-5, 5e-7)
    rows[0]["B"] = -1
    path = write_log(tmp_path / "log.jsonl", rows)
    assert cli.main(["vllm-host", "fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: B: expected a whole number >= 0" in err
    assert "Traceback" not in err


def test_a_grid_that_cannot_separate_the_terms_is_an_error(tmp_path):
    rows = [r for r in synthetic_rows(1e-4, 2e-5, 5e-7) if r["phase"] == "decode"]
    path = write_log(tmp_path / "log.jsonl", rows)
    with pytest.raises(ScenarioError, match="vary B and prompt tokens independently"):
        vllm_host.fit(vllm_host.read_log(path))


def test_the_recorded_log_reproduces_the_v1_presets_host_time_per_sequence():
    """vllm@v1's (and vllm@async's) host seconds per sequence are the engine core's
    measured here (the shipped log's fit) times the host-CPU factor the preset states:
    the published update_from_output of vLLM PR #46112 (0.142 ms at 128 requests on a
    GPU server) over this machine's fit of the same function at 128."""
    from sim.config import engines
    result = vllm_host.fit(vllm_host.read_log(SHIPPED_LOG))
    update = result.components["update_s"].coeffs
    factor = 0.142e-3 / (update["c0_s"] + update["c1_s_per_seq"] * 128)
    assert 0.15 < factor < 0.25
    per_seq_s = result.components["core_cpu_s"].coeffs["c1_s_per_seq"] * factor
    for ref in ("vllm@v1", "vllm@async"):
        preset = engines.resolve(ref)
        assert preset.host_per_seq_s == pytest.approx(per_seq_s, rel=0.005), ref


def test_fit_out_replaces_its_own_fit_but_never_a_file_fleetsim_did_not_write(tmp_path, capsys):
    """``vllm-host fit --out`` writes as fleetsim run does: a fit it wrote is replaced, a
    user's file (or a link) is refused with exit 2 and left as it was."""
    out = tmp_path / "fit.yaml"
    assert cli.main(["vllm-host", "fit", str(SHIPPED_LOG), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == SHIPPED_FIT.read_text(encoding="utf-8")
    assert cli.main(["vllm-host", "fit", str(SHIPPED_LOG), "--out", str(out)]) == 0
    mine = tmp_path / "notes.yaml"
    mine.write_text("my notes\n", encoding="utf-8")
    link = tmp_path / "link.yaml"
    link.symlink_to(out)
    capsys.readouterr()
    for target in (mine, link):
        assert cli.main(["vllm-host", "fit", str(SHIPPED_LOG), "--out", str(target)]) == 2
        assert "Traceback" not in capsys.readouterr().err
    assert mine.read_text(encoding="utf-8") == "my notes\n"
    assert link.is_symlink()
