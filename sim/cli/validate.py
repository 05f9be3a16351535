"""``fleetsim validate``: calibrate's ``validate`` command (``python -m calibrate
validate``), mounted here: validation scenarios served on a real engine (transformers or
vLLM) and fleetsim's predictions compared with the measurements. Its arguments and
handler are :mod:`calibrate.engines.commands`'."""
from __future__ import annotations

from calibrate.cli import mount


def add_validate(sub) -> None:
    mount(sub, "validate")
