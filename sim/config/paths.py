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
    if p.exists() or p.is_absolute():
        return p
    # only the shipped scenarios' own paths: `quickstart.yaml`, `validate/vllm/light.yaml`
    # or `scenarios/quickstart.yaml`; a path of some other folder that does not exist
    # (`myproj/quickstart.yaml`, a typo) stays as it is, and is reported missing
    parts = p.parts[1:] if p.parts[:1] == ("scenarios",) else p.parts
    candidate = data_dir("scenarios").joinpath(*parts) if parts and ".." not in parts \
        else None
    if candidate is not None and candidate.exists():
        return candidate
    return p
