"""The library of hardware and model profiles shipped under ``profiles/``.

Names are matched case-insensitively, so ``h100-sxm`` and ``H100-SXM`` are
the same profile. A scenario's inline ``hardware:`` / ``models:`` entries
take precedence over shipped ones of the same name.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sim.config.specs import HardwareSpec, ModelSpec
from sim.config.paths import data_dir
from sim.config.yamlio import load_data, load_model, load_model_fast


def _key(name: str) -> str:
    return name.strip().lower()


@lru_cache(maxsize=None)
def _load_dir(kind: str) -> dict[str, Path]:
    folder = data_dir("profiles") / kind
    out: dict[str, Path] = {}
    for path in sorted(folder.glob("*.yaml")):
        with open(path, encoding="utf-8") as fh:
            data = load_data(fh.read())
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str):      # read again, for the located error
            load_model(path, _SPECS[kind], kind=f"{kind} profile")
        out[_key(name)] = path
    return out


_SPECS = {"hardware": HardwareSpec, "models": ModelSpec}


@lru_cache(maxsize=None)
def _parse(kind: str, key: str) -> HardwareSpec | ModelSpec:
    """The profile, validated; a mistake in it is a located error (file, line, field)."""
    return load_model_fast(_load_dir(kind)[key], _SPECS[kind], kind=f"{kind} profile")


def hardware_names() -> list[str]:
    return [_parse("hardware", k).name for k in _load_dir("hardware")]


def model_names() -> list[str]:
    return [_parse("models", k).name for k in _load_dir("models")]


def find_hardware(name: str, inline: dict[str, HardwareSpec] | None = None) -> HardwareSpec | None:
    for key, spec in (inline or {}).items():
        if _key(key) == _key(name):
            return spec
    return _parse("hardware", _key(name)) if _key(name) in _load_dir("hardware") else None


def find_model(name: str, inline: dict[str, ModelSpec] | None = None) -> ModelSpec | None:
    for key, spec in (inline or {}).items():
        if _key(key) == _key(name):
            return spec
    return _parse("models", _key(name)) if _key(name) in _load_dir("models") else None
