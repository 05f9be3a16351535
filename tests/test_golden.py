"""Every shipped scenario's seeded results, bit for bit, as ``tests/data/golden`` pins
them (see ``tests/golden.py``): the guard that lets the code be reorganised."""
from __future__ import annotations

import json

import pytest

from golden import DIGESTS, SCENARIOS, digests

PINNED = json.loads(DIGESTS.read_text(encoding="utf-8"))


def test_every_shipped_scenario_is_pinned():
    assert sorted(PINNED) == sorted(p.stem for p in SCENARIOS)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_results_are_bitwise_what_they_were(path):
    now = digests(path)
    assert now["rows"] > 0
    assert now == PINNED[path.stem], (
        f"{path.stem}: results changed ({', '.join(k for k in now if now[k] != PINNED[path.stem][k])}); "
        "if the change is meant, run `.venv/bin/python tests/golden.py --update` and say why "
        "in the commit")
