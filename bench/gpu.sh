#!/usr/bin/env bash
# The benchmark on an NVIDIA GPU (needs PyPI access for the CUDA wheels).
#   bench/gpu.sh [run.py options, e.g. --cases myrtle5 --reps 3]
# 1. bench/.venv-gpu-kc: kernelcli (this checkout) on jax[cuda12]==$KC_JAX.
# 2. bench/.venv-gpu-nt: neural-tangents 0.6.5 on jax[cuda12]==0.4.30. If that
#    fails to install or sees no GPU, kernelcli runs alone (--skip-nt), and the
#    report's bandwidth fraction compares it with the device's own x+1 bandwidth
#    (the floor: model bytes per entry / that bandwidth).
# Default cases skip the depth-21 nets, whose compile times dominate; the whole
# script should take < 5 minutes once the wheels are downloaded.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KC_VENV="$HERE/.venv-gpu-kc"
NT_VENV="$HERE/.venv-gpu-nt"
KC_JAX="${KC_JAX:-0.10.2}"
export JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false
ON_GPU='import jax; assert jax.devices()[0].platform == "gpu", jax.devices()'

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

if ! "$KC_VENV/bin/python" -c "$ON_GPU; import kernelcli" 2>/dev/null; then
  python3 -m venv "$KC_VENV"
  "$KC_VENV/bin/python" -m pip install -q "jax[cuda12]==$KC_JAX" -e "$ROOT"
  "$KC_VENV/bin/python" -c "$ON_GPU; print('kernelcli venv: jax', jax.__version__)"
fi

SKIP_NT=()
if ! (NT_VENV="$NT_VENV" JAX_EXTRA=cuda12 "$HERE/setup_nt.sh" >&2 \
      && "$NT_VENV/bin/python" -c "$ON_GPU"); then
  echo "neural-tangents on CUDA jax 0.4.30 unavailable: kernelcli alone" >&2
  SKIP_NT=(--skip-nt)
fi

KC_PYTHON="$KC_VENV/bin/python" NT_PYTHON="$NT_VENV/bin/python" \
  "$KC_VENV/bin/python" "$HERE/run.py" --bw jax --timeout 120 --report "$HERE/out/gpu.md" \
  --cases "${GPU_CASES:-cnn5_gap,myrtle5,cnn5_flatten,fc2}" "${SKIP_NT[@]}" "$@"
