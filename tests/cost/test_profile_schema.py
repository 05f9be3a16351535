"""The calibrated profile's declared schema (``sim/cost/profile_schema.py``), the one
document between calibrate/ and sim/cost: every shipped profile reads through it to the
numbers its file holds, is written back through it to the same bytes, and a profile a
writer got wrong is refused naming the field before anything is written."""
from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.fitting.profile_file import profile_text, write_profile
from sim.config.paths import data_dir
from sim.cost.profile_file import load_profile
from sim.cost.profile_schema import (ENGINE_SCALARS, TERMS, CalibratedProfile,
                                     parse_profile)

ROOT = Path(__file__).resolve().parents[2]


def _is_profile(path: Path) -> bool:
    try:
        load_profile(path)
    except ValueError:
        return False
    return True


# every calibrated profile that ships (and any a test or scenario folder holds)
SHIPPED = sorted(p for folder in (data_dir("profiles") / "calibrated", ROOT / "tests" / "data",
                                  ROOT / "scenarios")
                 for p in folder.rglob("*.yaml") if _is_profile(p))


def _kinds(rows) -> list:
    return [[(type(v), v) for v in row] for row in rows or []]


def test_every_shipped_profile_reads_through_the_schema_to_the_numbers_in_its_file():
    """What the schema hands the cost model is what the hand reader it replaced took from
    the file's document: each table row as written (its numbers' types too), the overhead
    and an engine's terms with the same defaults where absent, tp and the dtypes."""
    assert len(SHIPPED) > 900
    engines = 0
    for path in SHIPPED:
        doc = load_profile(path)
        prof = parse_profile(doc, str(path))
        for term in TERMS:
            assert _kinds(getattr(prof.tables, term)) == _kinds(doc["tables"].get(term)), \
                (path, term)
        over = doc.get("overhead") or {}
        for key in ("constant_s", "per_seq_s", "attn_decode_per_seq_per_layer_s"):
            assert float(getattr(prof.overhead, key)) == float(over.get(key, 0.0)), (path, key)
        assert prof.overhead.host_per_seq_s == over.get("host_per_seq_s"), path
        assert prof.tp == doc.get("tp", 1) and prof.dtype == doc.get("dtype") and \
            prof.kv_dtype == doc.get("kv_dtype"), path
        assert prof.tp_comm_measured == doc.get("tp_comm_measured", False), path
        assert prof.device_name == doc.get("device_name"), path
        engine = doc.get("engine")
        assert (prof.engine is None) == (engine is None), path
        if engine is not None:
            engines += 1
            for key in ENGINE_SCALARS:
                assert float(getattr(prof.engine, key)) == float(engine.get(key, 0.0))
            assert prof.engine.per_kv_token_s == engine.get("per_kv_token_s")
            assert prof.engine.model_scale == engine.get("model_scale", 1.0)
            assert prof.engine.replaces_attention == engine.get("replaces_attention", False)
    assert engines >= 4


def _one_a_folder(paths: list[Path]) -> list[Path]:
    """Every profile but those built from measured kernels, and of those the first of
    each GPU and engine's folder (each writer and layout, in a few seconds)."""
    seen, out = set(), []
    for p in paths:
        if "gpu" not in p.parts or p.parent not in seen:
            seen.add(p.parent)
            out.append(p)
    return out


def test_a_shipped_profile_written_through_the_schema_is_its_own_bytes():
    """A profile's writers serialise through the schema: the document of a shipped
    profile (torch-timed, engine-fitted, built from kernels, dense and MoE), validated
    and written again, is the file byte for byte (its fields in the writers' order,
    each number with its type and digits)."""
    for path in _one_a_folder(SHIPPED) + [p for p in SHIPPED if "mixtral" in p.name][:2]:
        assert profile_text(load_profile(path)) == path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d["tables"].pop("lm_head"), "tables.lm_head is missing"),
    (lambda d: d["overhead"].update(per_seq_s=float("nan")), "overhead.per_seq_s must be"),
    (lambda d: d.update(tp=True), "tp must be a whole number, got a bool"),
    (lambda d: d.update(engine={"per_kv_token_s": [[4, 1e-9], [2, 1e-9]]}),
     "engine.per_kv_token_s: new tokens must be >= 1 and strictly increasing"),
    (lambda d: d.update(tables_note="x"), "tables_note is not a field of a calibrated profile"),
    (lambda d: d.update(overhead=5), "overhead must be a mapping, got 5"),
])
def test_a_writer_is_refused_a_profile_its_schema_refuses_and_nothing_is_written(
        tmp_path, edit, fragment):
    doc = load_profile(data_dir("profiles") / "calibrated" / "cpu" / "tiny-llama.yaml")
    bad = CalibratedProfile.model_validate(doc).model_dump(exclude_unset=True)
    edit(bad)
    path = tmp_path / "p.yaml"
    with pytest.raises(ValueError, match="calibrated profile .*p.yaml") as err:
        write_profile(bad, path)
    assert fragment in str(err.value)
    assert not path.exists()


def test_the_engine_fit_reads_the_profile_through_its_schema_not_past_a_typo():
    """calibrate's engine fit prices the profile's steps as the cost model does, through
    the schema: a misspelt overhead key is refused by name, where a hand reader took
    its default (0 s a sequence) and fitted the engine's terms to the wrong base."""
    import numpy as np

    from calibrate.engines.step_fit import StepRows, profile_seconds
    doc = load_profile(data_dir("profiles") / "calibrated" / "cpu" / "tiny-llama.yaml")
    rows = StepRows(*(np.array([v]) for v in (8.0, 2.0, 40.0, 0.0, 40.0, 1e-3, 0.0, 0.0)))
    assert profile_seconds(doc, rows)[0] > 0
    typo = CalibratedProfile.model_validate(doc).model_dump(exclude_unset=True)
    typo["overhead"]["per_sequence_s"] = typo["overhead"].pop("per_seq_s")
    with pytest.raises(ValueError, match="overhead.per_sequence_s is not a field"):
        profile_seconds(typo, rows)
