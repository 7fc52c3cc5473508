#!/usr/bin/env bash
# Create bench/.venv-nt with neural-tangents 0.6.5 on CPU jax 0.4.30 (the
# reference implementation the benchmark compares kernelcli against).
# Idempotent: does nothing when the venv exists and neural_tangents imports.
#   NT_VENV    where to put the venv (default bench/.venv-nt)
#   JAX_EXTRA  jax's pip extra: cpu (default) or cuda12 (bench/gpu.sh)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${NT_VENV:-$HERE/.venv-nt}"
PY="$VENV/bin/python"

# neural_tangents/__init__.py imports .experimental, which needs TensorFlow;
# an empty stand-in module is enough for stax.
CHECK='import sys, types
sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")
import jax, neural_tangents
assert neural_tangents.__version__ == "0.6.5", neural_tangents.__version__
print("neural-tangents", neural_tangents.__version__, "jax", jax.__version__)'

if [ -x "$PY" ] && "$PY" -c "$CHECK" 2>/dev/null; then
  exit 0
fi

python3 -m venv "$VENV"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "jax[${JAX_EXTRA:-cpu}]==0.4.30" "jaxlib==0.4.30" frozendict "numpy<2" \
  scipy opt_einsum ml_dtypes psutil pyyaml
"$PY" -m pip install -q --no-deps "neural-tangents==0.6.5"
"$PY" -c "$CHECK"
