"""Shared test set-up: makes ``tests/`` importable (for ``simfactories``) and
offers fixtures built from its factories."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The gate gives the same verdict on a slow or busy machine and on every run: no deadline
# per example, no health check that times data generation, the same examples each time.
settings.register_profile("gate", deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gate")

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

import simfactories  # noqa: E402


@pytest.fixture
def trace_stream(tmp_path):
    """Build a trace-replay stream from rows ``(timestamp_s, prompt, output)``.

    Each call writes its own CSV under the test's temporary folder, so a test
    controls every arrival time and length exactly.
    """
    counter = iter(range(1_000_000))

    def build(rows, **extra):
        path = tmp_path / f"trace_{next(counter)}.csv"
        return simfactories.trace_stream(path, rows, **extra)

    return build


@pytest.fixture(autouse=True)
def _restore_float_modes():
    """Calibration sets flush-to-zero for timing; other tests (hypothesis's
    subnormal floats) must not inherit it in the same worker."""
    yield
    import sys
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_flush_denormal(False)
