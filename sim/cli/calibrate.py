"""``fleetsim calibrate``: calibrate's ``profile`` command (``python -m calibrate
profile``), mounted here: a step-time profile timed on this machine with torch, or built
from a database of kernels measured on real GPUs. Its arguments and handler are
:mod:`calibrate.microbench.commands`'."""
from __future__ import annotations

from calibrate.cli import mount


def add_calibrate(sub) -> None:
    mount(sub, "calibrate")
