"""A served vLLM run's folder: the names of its plan and log, the vLLM environment that
serves it, and the error that names what is missing. Shared by the engine (``engine``),
its timing (``timing``) and the host-time recording (``host``)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VENV_ENV = "FLEETSIM_VLLM_PYTHON"          # another vLLM environment's python, if wanted
PLAN_NAME = "plan.json"
LOG_NAME = "vllm_log.json"


class VllmError(ValueError):
    """A scenario vLLM cannot serve, or a missing vLLM environment (named, with the fix)."""


def vllm_python() -> Path:
    """The vLLM environment's python, or a VllmError naming how to make it."""
    env = os.environ.get(VENV_ENV)
    python = Path(env) if env else ROOT / ".venv-vllm" / "bin" / "python"
    if not python.is_file():
        where = f"{VENV_ENV}={env}" if env else str(python.parent.parent)
        raise VllmError(f"validate --engine vllm: the vLLM environment is missing ({where} "
                        f"has no python); build it with `make vllm` (about 2 minutes, "
                        f"2.5 GB) or set {VENV_ENV} to a python that imports vllm")
    return python


def log_file(folder: Path) -> Path | None:
    """The vLLM log in ``folder`` (as served, or gzip-compressed as shipped)."""
    for name in (LOG_NAME, LOG_NAME + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None
