"""Whole forwards of the plain-torch model under a profile's own settings.

Used to check a profile against the model it describes: the same device,
dtype, thread count and clock as the calibration, fresh measurements.

    from calibrate.microbench.check import measure_forwards
    rows = measure_forwards("profiles/calibrated/cpu/tiny-llama.yaml", prefill=[1, 128, 2048])
"""
from __future__ import annotations

from pathlib import Path
from statistics import median

import yaml

from calibrate.microbench import bench
from calibrate.microbench import forwards
from calibrate.microbench import timing
from calibrate.microbench.model import LlamaLike
from calibrate.fitting.shapes import ModelShape, ShardShape


def load(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def profile_settings(data: dict, **overrides) -> timing.Settings:
    """Benchmark settings that reproduce a profile's device, dtype, tp, threads and clock."""
    kw = dict(device=data["device"], dtype=data["dtype"], tp=data["tp"],
              threads=data.get("threads"), clock=data.get("clock"))
    kw.update(overrides)
    return timing.Settings(**kw)


def measure_forwards(profile: str | Path | dict, prefill: list[int] = (),
                     decode: list[tuple[int, int]] = (), rounds: int = 5,
                     point_budget_s: float = 0.5, num_layers: int | None = None
                     ) -> list[forwards.Forward]:
    """Median seconds of whole forwards, timed in interleaved rounds: one sequence of
    n tokens for each n in ``prefill``, and (batch, context) decode steps."""
    data = profile if isinstance(profile, dict) else load(profile)
    shape = ModelShape.from_mapping(data["model"])
    settings = profile_settings(data, rounds=rounds, point_budget_s=point_budget_s)
    timing.setup(settings)
    timer = timing.Timer(settings)
    shapes = ([forwards.prefill_shape(n) for n in prefill]
              + [forwards.decode_shape(b, c) for b, c in decode])
    max_pos = max([n for n in prefill] + [c + 1 for _, c in decode]) + 1
    net = LlamaLike(ShardShape(shape, settings.tp), settings.device, settings.torch_dtype,
                    num_layers=num_layers or shape.num_layers, max_positions=max_pos,
                    seed=settings.seed)
    return forwards.time_forwards(net, shapes, timer, seed=settings.seed)


def machine_speed(profile: str | Path | dict, tokens: tuple[int, ...] = (1, 16, 128, 512),
                  rounds: int = 5, point_budget_s: float = 0.3
                  ) -> tuple[float, list[tuple[int, float, float]]]:
    """How fast this machine runs the profile's terms now against when the profile was
    made: its dense layer re-timed at ``tokens`` (token counts it measured) under its
    own settings. Returns the median of seconds now / seconds recorded (below 1: faster
    today) and the (tokens, recorded, now) points.

    A shared or throttled CPU drifts as a whole from day to day; a check of whole
    forwards against the profile divides this out to test what the profile models."""
    data = profile if isinstance(profile, dict) else load(profile)
    recorded = {int(x): float(s) for x, s, *_ in data["measured"]["dense"]}
    missing = [n for n in tokens if n not in recorded]
    if missing:
        raise ValueError(f"the profile measured no dense point at {missing} tokens "
                         f"(it has {sorted(recorded)})")
    settings = profile_settings(data, rounds=rounds, point_budget_s=point_budget_s)
    timing.setup(settings)
    shard = ShardShape(ModelShape.from_mapping(data["model"]), settings.tp)
    now = bench.bench_dense(shard, settings, list(tokens), timing.Timer(settings))
    pts = [(int(p.x), recorded[int(p.x)], p.seconds) for p in now]
    return median(now / rec for _, rec, now in pts), pts
