"""A calibrated profile's file: found, read (safely, cached), checked through its schema
(``profile_schema.py``) and against the pool's model and tensor-parallel degree."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from sim.config.inputs import MAX_DOC_BYTES, DataFiles, InputFileError, read_bytes, shown
from sim.config.paths import data_dir
from sim.config.specs import ModelSpec
from sim.config.yamlio import load_data
from sim.cost.profile_schema import SHAPE_FIELDS, CalibratedProfile, parse_profile


def resolve_profile_path(profile: str, base_dir: DataFiles | str | Path | None = None
                         ) -> Path:
    """The profile file: relative to ``base_dir`` (the scenario's folder), as given,
    or relative to the shipped ``profiles/`` folder; the first that exists where a
    :class:`~sim.config.inputs.DataFiles` allows. ValueError if none does."""
    files = base_dir if isinstance(base_dir, DataFiles) else None
    p = Path(profile).expanduser()
    candidates = [p] if p.is_absolute() else (
        ([files.locate(p) if files else Path(base_dir) / p] if base_dir is not None else [])
        + [p, data_dir("profiles") / p])
    refused: InputFileError | None = None
    for c in candidates:
        if c.is_file():
            try:
                return files.check(c) if files else c
            except InputFileError as exc:
                refused = refused or exc
    if refused is not None:
        raise ValueError(f"calibrated profile {refused}")
    tried = ", ".join(shown(c) for c in candidates)
    raise ValueError(f"calibrated profile '{profile}' not found (looked for {tried}); "
                     f"make one with `fleetsim calibrate`")


@lru_cache(maxsize=32)
def _read(path: str, mtime: float) -> dict:
    try:
        data = load_data(read_bytes(path, max_bytes=MAX_DOC_BYTES).decode("utf-8"))
    except InputFileError as exc:
        raise ValueError(str(exc)) from None
    except yaml.MarkedYAMLError as exc:      # its text quotes the file: give the line only
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ValueError(f"{path} is not valid YAML{where}") from None
    except yaml.YAMLError:
        raise ValueError(f"{path} is not valid YAML") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text file") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a calibrated profile") from None
    if not isinstance(data, dict) or "tables" not in data or "model" not in data:
        raise ValueError(f"{path} is not a calibrated profile (no 'tables' / 'model')")
    return data


def load_profile(path: str | Path) -> dict:
    """The profile file's document as written (a calibrated profile's two blocks
    present; the rest unchecked: ``check_profile`` reads it through its schema)."""
    path = Path(path)
    return _read(str(path.resolve()), path.stat().st_mtime)


def check_profile(data: dict | CalibratedProfile, model: ModelSpec, tp: int,
                  where: str) -> CalibratedProfile:
    """The profile, checked: ValueError unless it reads through its schema and was made
    for ``model``'s shapes at ``tp``."""
    profile = data if isinstance(data, CalibratedProfile) else parse_profile(data, where)
    shape = profile.model
    diffs = [f"{f} {getattr(shape, f)} vs {getattr(model, f)}" for f in SHAPE_FIELDS
             if getattr(shape, f) is not None and int(getattr(shape, f)) != int(getattr(model, f))]
    if diffs:
        raise ValueError(f"{where} was calibrated for model '{shape.name}', whose shape "
                         f"differs from the pool's model '{model.name}' ({'; '.join(diffs)})")
    if int(profile.tp) != int(tp):
        raise ValueError(f"{where} was calibrated at tp={profile.tp} but the pool runs "
                         f"tp={tp}; calibrate with `fleetsim calibrate --tp {tp}`")
    return profile
