"""fleetsim against a peer simulator on the same request lists (``make bench``; not part of
``make test``; issue #47).

The peer is vllm-sr-sim (PyPI, numpy and scipy only), a request-level simulator, in its
own environment (``make peers``: .venv-peers); without it the test is skipped. Each list
is Poisson arrivals with conversation-trace lengths (tests/bench/peer_requests.py) on
Llama-2-70B at TP2 on A100s, at 0.7 requests/s per replica: 4,000 requests on 2
replicas, the shipped 40,000 on 16 (scenarios/bench-peer.yaml) and 40,000 on 64.

Each side runs as its own process, the two alternating (the first to run swaps each
round) so that both see the machine's speed, best of :data:`REPEATS`. Two times each:
the simulation alone (reading the list and simulating it: fleetsim's set-up and event
loop, ``sim_wall_s``; vllm-sr-sim's reading of the list into its requests and its
``Fleet.run``) and end to end (the process, from its start to its exit). The mean TTFT
and throughput of both are printed beside them, to show they simulate comparable work.
Target (issue #47): fleetsim's simulation alone no slower than the peer's at 16
replicas (ratio <= 1.0).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_requests import SHIPPED, SHIPPED_REPLICAS, read_requests, list_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FLEETSIM = Path(__file__).with_name("fleetbench.py")
PEER = Path(__file__).with_name("peer_sr_sim.py")
PEER_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
SCENARIO = ROOT / "scenarios" / "bench-peer.yaml"
REPEATS = 3
# (replicas, requests); the 16-replica list is the shipped one
SIZES = ((2, 4_000), (SHIPPED_REPLICAS, 40_000), (64, 40_000))

pytestmark = [pytest.mark.bench,
              pytest.mark.skipif(not PEER_PYTHON.exists(),
                                 reason="the peer's environment .venv-peers is missing: "
                                        "`make peers` builds it (pip install vllm-sr-sim)")]


def timed(command: list[str], env: dict[str, str]) -> dict:
    """Run ``command`` (a runner printing one JSON line last) and add its process's wall."""
    t0 = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    wall_s = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["end_to_end_s"] = wall_s
    return out


def fleetsim_run(path: Path, replicas: int) -> dict:
    last_s = read_requests(path)[-1][0]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}      # this tree's sim, wherever installed
    out = timed([sys.executable, str(FLEETSIM), str(SCENARIO), "--trace", str(path),
                 "--replicas", str(replicas), "--duration", str(int(last_s) + 1)], env)
    out["sim_s"] = out["sim_wall_s"]
    return out


def peer_run(path: Path, replicas: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = timed([str(PEER_PYTHON), str(PEER), str(path), "--replicas", str(replicas)], env)
    out["sim_s"] = out["read_s"] + out["sim_s"]
    return out


def paired(path: Path, replicas: int) -> tuple[list[dict], list[dict]]:
    """REPEATS runs of each, alternating, the first side swapped each round."""
    ours, theirs = [], []
    for i in range(REPEATS):
        sides = [(ours, fleetsim_run), (theirs, peer_run)]
        for runs, run in (sides if i % 2 == 0 else sides[::-1]):
            runs.append(run(path, replicas))
    return ours, theirs


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Both sides' sources byte-compiled, as an install leaves them (this machine may set
    PYTHONDONTWRITEBYTECODE; the peer's pip install compiled its own)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "sim", "tests/bench"],
                   cwd=ROOT, check=True, capture_output=True)


def test_fleetsim_no_slower_than_vllm_sr_sim_on_the_same_requests(tmp_path, capsys):
    rows = []
    for replicas, requests in SIZES:
        path = (SHIPPED if replicas == SHIPPED_REPLICAS
                else list_for(replicas, requests, tmp_path / f"peer-{replicas}.csv.gz"))
        ours, theirs = paired(path, replicas)
        best = {side: {key: min(r[key] for r in runs) for key in ("sim_s", "end_to_end_s")}
                for side, runs in (("fleetsim", ours), ("peer", theirs))}
        rows.append({
            "replicas": replicas, "requests": requests,
            "fleetsim_sim_s": best["fleetsim"]["sim_s"], "peer_sim_s": best["peer"]["sim_s"],
            "sim_ratio": best["fleetsim"]["sim_s"] / best["peer"]["sim_s"],
            "fleetsim_e2e_s": best["fleetsim"]["end_to_end_s"],
            "peer_e2e_s": best["peer"]["end_to_end_s"],
            "e2e_ratio": best["fleetsim"]["end_to_end_s"] / best["peer"]["end_to_end_s"],
            "fleetsim_us_per_request": 1e6 * best["fleetsim"]["sim_s"] / requests,
            "ttft_mean_s": (ours[0]["ttft_mean_s"], theirs[0]["ttft_mean_s"]),
            "requests_per_s": (ours[0]["requests_per_s"], theirs[0]["requests_per_s"]),
            "output_tokens_per_s": (ours[0]["output_tokens_per_s"],
                                    theirs[0]["output_tokens_per_s"]),
            "completed": (ours[0]["completed"], theirs[0]["completed"]),
        })
    with capsys.disabled():
        print(f"\nfleetsim against {theirs[0]['peer']}: best of {REPEATS} alternating runs "
              "each; ratio = fleetsim / peer (below 1: fleetsim faster)")
        print("| replicas | requests | simulation: fleetsim | peer | ratio | end to end: "
              "fleetsim | peer | ratio | fleetsim us / request | mean TTFT s (fleetsim, peer) "
              "| requests/s | output tokens/s |")
        for r in rows:
            print(f"| {r['replicas']} | {r['requests']:,} | {r['fleetsim_sim_s']:.2f} s | "
                  f"{r['peer_sim_s']:.2f} s | {r['sim_ratio']:.2f} | {r['fleetsim_e2e_s']:.2f} s"
                  f" | {r['peer_e2e_s']:.2f} s | {r['e2e_ratio']:.2f} | "
                  f"{r['fleetsim_us_per_request']:.0f} | "
                  f"{r['ttft_mean_s'][0]:.3f}, {r['ttft_mean_s'][1]:.3f} | "
                  f"{r['requests_per_s'][0]:.2f}, {r['requests_per_s'][1]:.2f} | "
                  f"{r['output_tokens_per_s'][0]:,.0f}, {r['output_tokens_per_s'][1]:,.0f} |")
    for r in rows:      # every request simulated to its end on both sides
        assert r["completed"] == (r["requests"], r["requests"])
    target = next(r for r in rows if r["replicas"] == SHIPPED_REPLICAS)
    assert target["sim_ratio"] <= 1.0, (
        f"fleetsim's simulation took {target['sim_ratio']:.2f}x vllm-sr-sim's at "
        f"{SHIPPED_REPLICAS} replicas (target 1.0)")
