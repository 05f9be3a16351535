"""The sources read clean to pyflakes: no unused import, undefined name or shadowed
definition in ``sim``, ``calibrate`` or the tests."""
from __future__ import annotations

import io
from pathlib import Path

from pyflakes.api import checkRecursive
from pyflakes.reporter import Reporter

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_finds_nothing():
    out = io.StringIO()
    found = checkRecursive([str(ROOT / d) for d in ("sim", "calibrate", "tests")],
                           Reporter(out, out))
    assert found == 0, out.getvalue()
