"""Plots of a calibrated profile: fitted tables against the measured points.

One panel per term (log-log), plus whole forwards of the plain-torch model
against the full prediction. Drawn on matplotlib ``Figure`` objects with
the Agg canvas, so no display or pyplot state is involved.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from calibrate.fitting.tables import TERMS, evaluate, predict_steps
from sim.output.files.atomic_write import write_file

LABELS = {
    "dense": "tokens in the step",
    "attn_prefill": "prefill work Σ chunk·(context + chunk/2)",
    "attn_decode": "decode KV tokens read",
    "lm_head": "sequences in the step",
    "tp_comm": "tokens in the step",
}


def _term_panel(ax, name: str, profile: dict) -> None:
    table = profile["tables"][name]
    measured = [row[:2] for row in profile.get("measured", {}).get(name, [])]
    alpha = profile.get("overhead", {}).get("attn_decode_per_seq_per_layer_s") or 0.0
    if name == "attn_decode" and alpha:
        # the table holds decode attention less its per-sequence part (in the overhead)
        measured = [[x, max(t - alpha * b, 0.05 * t)]
                    for x, t, b in profile["measured"][name]]
    held = {round(row[0], 6) for row in profile.get("held_back_points", {}).get(name, [])}
    title = f"{name} (one layer)" if name != "lm_head" else name
    if name == "attn_decode" and alpha:
        title += f" less {1e6 * alpha:.1f} us/seq"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(LABELS[name], fontsize=8)
    ax.set_ylabel("seconds", fontsize=8)
    if not table or not any(t > 0 for _, t in table):
        why = ("tp = 1: no all-reduce" if profile.get("tp", 1) == 1
               else "not measured (one device visible)")
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    xs = np.array([p[0] for p in table])
    grid = np.geomspace(xs[0], xs[-1] * 2.0, 200)
    ax.loglog(grid, evaluate(table, grid), "-", color="C0", lw=1.2, label="fitted table")
    kept = [(x, t) for x, t in measured if round(x, 6) not in held]
    back = [(x, t) for x, t in measured if round(x, 6) in held]
    if kept:
        ax.loglog(*zip(*kept), "o", ms=3.5, color="C1", label="measured")
    if back:
        ax.loglog(*zip(*back), "x", ms=6, mew=1.5, color="C3", label="held back")
    err = profile.get("held_back_error", {}).get(name, {})
    if err.get("points"):
        ax.text(0.03, 0.95, f"held back: median {100 * err['median']:.1f}%, "
                f"max {100 * err['max']:.1f}%", transform=ax.transAxes, va="top", fontsize=7)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.25)


def _forward_panel(ax, profile: dict) -> None:
    rows = profile.get("forwards", [])
    ax.set_title(f"whole forward ({profile['forward_layers']} layers)", fontsize=10)
    ax.set_xlabel("tokens in the step", fontsize=8)
    ax.set_ylabel("seconds", fontsize=8)
    if not rows:
        return
    tables = profile["tables"]
    over = (profile["overhead"]["constant_s"], profile["overhead"]["per_seq_s"])
    for kind, color in (("prefill", "C0"), ("decode", "C2")):
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            continue
        n = np.array([r["num_tokens"] for r in sel], dtype=float)
        pred = predict_steps(tables, over, profile["forward_layers"], n,
                             np.array([r["num_seqs"] for r in sel], dtype=float),
                             np.array([r["prefill_attn_work"] for r in sel], dtype=float),
                             np.array([r["decode_kv_tokens"] for r in sel], dtype=float))
        ax.loglog(n, [r["seconds"] for r in sel], "o", ms=4, color=color,
                  label=f"{kind}: measured")
        ax.loglog(n, pred, "-", color=color, lw=1.0, label=f"{kind}: predicted")
        for r, p in zip(sel, pred):
            if r.get("held_back"):
                ax.loglog([r["num_tokens"]], [r["seconds"]], "x", ms=7, mew=1.5, color="C3")
    err = profile.get("held_back_error", {}).get("whole_forward", {})
    if err.get("points"):
        ax.text(0.03, 0.95, f"held back: median {100 * err['median']:.1f}%, "
                f"max {100 * err['max']:.1f}%", transform=ax.transAxes, va="top", fontsize=7)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.25)


def plot_profile(profile: dict, path: str | Path) -> Path:
    """Write the fitted-vs-measured figure of ``profile`` (a profile dict) to ``path``."""
    fig = Figure(figsize=(13, 8), dpi=90)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3)
    for ax, name in zip(axes.flat, TERMS):
        _term_panel(ax, name, profile)
    _forward_panel(axes.flat[5], profile)
    fig.suptitle(f"{profile['model']['name']} on {profile['device_name']} "
                 f"({profile['dtype']}, tp={profile['tp']}"
                 + (f", {profile['threads']} thread(s)" if profile.get("threads") else "")
                 + f"), torch {profile['torch_version']}, {profile['date']}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    path = Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_file(path, buffer.getvalue())     # never through a link
    return path
