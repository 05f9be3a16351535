#!/usr/bin/env bash
# Calibrate Llama-3.1-8B and Llama-3.1-70B layer shapes on a CUDA device.
#
#   calibrate/gpu_run.sh [OUT_DIR] [--quick]
#
# Writes one profile per (model, tp) into OUT_DIR (default: $OUT), each with
# its plot and log, plus gpu_run.log:
#   llama-3.1-8b.yaml      tp=1
#   llama-3.1-8b-tp2.yaml  tp=2 shard (heads/2, kv_heads/2, ffn/2)
#   llama-3.1-70b-tp2.yaml tp=2 shard
#   llama-3.1-70b-tp4.yaml tp=4 shard
# On one visible GPU the all-reduce of tp>1 is not measured (the simulator
# then uses the roofline of the pool's interconnect for it). Meant to finish
# in under 8 minutes on one H100/H200-class GPU.
#
# --quick (or CALIBRATE_QUICK=1): tiny-llama at tp=1 and tp=2 with few
# points, on CUDA when torch sees a GPU and on the CPU otherwise: a smoke
# test of this script that runs anywhere.
#
# Needs torch, numpy, PyYAML, matplotlib and pydantic; not the simulator's
# other dependencies (it runs `python -m calibrate profile`, which is
# `fleetsim calibrate`). PYTHON picks the interpreter
# (default: .venv/bin/python when present, else python3); CALIBRATE_DEVICE
# forces cpu or cuda; CALIBRATE_JOBS replaces the list of jobs, e.g.
# "llama-3.1-8b:1 llama-3.1-70b:4".
set -euo pipefail

quick="${CALIBRATE_QUICK:-0}"
out=""
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "gpu_run.sh: unknown option $arg" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done
out="${out:-${OUT:-}}"
if [[ -z "$out" ]]; then
  echo "gpu_run.sh: give the output folder as \$1 or set OUT" >&2
  exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$repo"

info="$("$PYTHON" -c 'import torch; c = torch.cuda.is_available()
print(int(c), "torch", torch.__version__, torch.cuda.get_device_name(0) if c else "(no CUDA device)")')"
has_cuda="${info%% *}"
if [[ "$quick" == 1 ]]; then
  device="${CALIBRATE_DEVICE:-$([[ "$has_cuda" == 1 ]] && echo cuda || echo cpu)}"
  jobs=("tiny-llama 1" "tiny-llama 2")
  extra=(--quick)
else
  device="${CALIBRATE_DEVICE:-cuda}"
  if [[ "$device" == cuda && "$has_cuda" != 1 ]]; then
    echo "gpu_run.sh: torch sees no CUDA device (use --quick for a CPU smoke test)" >&2
    exit 1
  fi
  jobs=("llama-3.1-8b 1" "llama-3.1-8b 2" "llama-3.1-70b 2" "llama-3.1-70b 4")
  extra=()
fi

if [[ -n "${CALIBRATE_JOBS:-}" ]]; then
  jobs=()
  for job in $CALIBRATE_JOBS; do jobs+=("${job%%:*} ${job##*:}"); done
fi

log="$out/gpu_run.log"
: >"$log"
start=$SECONDS
{
  echo "gpu_run.sh: device=$device quick=$quick out=$out"
  echo "${info#* }"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
} 2>&1 | tee -a "$log"

for job in "${jobs[@]}"; do
  read -r model tp <<<"$job"
  t0=$SECONDS
  PYTHONUNBUFFERED=1 "$PYTHON" -m calibrate profile --model "$model" --device "$device" --tp "$tp" \
    --out "$out" ${extra[@]+"${extra[@]}"} 2>&1 | tee -a "$log"
  echo "gpu_run.sh: $model tp=$tp done in $((SECONDS - t0)) s" | tee -a "$log"
done
echo "gpu_run.sh: all done in $((SECONDS - start)) s" | tee -a "$log"
