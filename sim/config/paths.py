"""Where the shipped data lives: inside the wheel, or beside the source tree."""
from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent      # sim/


def data_dir(name: str) -> Path:
    """``profiles`` or ``scenarios``: the wheel's copy, else the repository's."""
    packaged = _PACKAGE_DIR / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent / name


def resolve_scenario_path(path: str | Path) -> Path:
    """A scenario path as given, or else relative to the shipped scenarios.

    ``fleetsim run scenarios/quickstart.yaml`` works from any directory after
    a plain ``pip install``.
    """
    p = Path(path)
    if p.exists():
        return p
    shipped = data_dir("scenarios")
    for candidate in (shipped / p, shipped / p.name):
        if candidate.exists():
            return candidate
    return p
