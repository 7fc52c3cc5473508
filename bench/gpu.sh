#!/usr/bin/env bash
# The GPU benchmark: the six bench cases through `compute`, both plans, one table.
#   bench/gpu.sh [gpu.py options, e.g. --cases myrtle5,fc2 --engines accelerator]
# Python: a python3 whose jax already sees a GPU and has kernelcli's dependencies
# (click, h5py, pyyaml) runs this checkout from PYTHONPATH; otherwise
# bench/.venv-gpu-kc is made with jax[cuda12]==$KC_JAX (needs a package registry).
# neural-tangents on the same GPU needs jax 0.4.30's CUDA wheels: on a machine
# without a registry it is left out, and BENCHMARKS.md compares with its published
# V100 figures and with the CPU tables measured side by side.
# Writes bench/out/gpu.md (+ .json); should take < 5 minutes.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
KC_JAX="${KC_JAX:-0.10.2}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 KERNELCLI_CACHE_DIR=off
ON_GPU='import jax; assert jax.devices()[0].platform == "gpu", jax.devices(); import click, h5py, yaml'

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if python3 -c "$ON_GPU" 2>/dev/null; then
  PY=python3
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
  VENV="$HERE/.venv-gpu-kc"
  if ! "$VENV/bin/python" -c "$ON_GPU" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "jax[cuda12]==$KC_JAX" -e "$ROOT"
  fi
  PY="$VENV/bin/python"
fi
"$PY" -c "import jax, kernelcli; print('jax', jax.__version__, jax.devices(), kernelcli.__file__)"
"$PY" "$HERE/gpu.py" --report "$HERE/out/gpu.md" "$@"
