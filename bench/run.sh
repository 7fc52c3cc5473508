#!/usr/bin/env bash
# The CPU benchmark: neural-tangents 0.6.5 vs kernelcli, one markdown report
# (stdout and bench/out/latest.md). Options go to bench/run.py:
#   bench/run.sh [--cases cnn5_gap,fc2] [--quick] [--reps N] [--n N]
#   bench/run.sh --whole [--quick]   # only the whole-process table (bench/whole.py)
# KC_PYTHON: the interpreter with kernelcli installed (default: the README's
# .venv at the repository root, else /work/venv's, else python3).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEFAULT_PY="$HERE/../.venv/bin/python"
[ -x "$DEFAULT_PY" ] || DEFAULT_PY=/work/venv/bin/python
[ -x "$DEFAULT_PY" ] || DEFAULT_PY=python3
export KC_PYTHON="${KC_PYTHON:-$DEFAULT_PY}"
# NT_VENV (setup_nt.sh's venv) also tells run.py where NT's interpreter is.
export NT_PYTHON="${NT_PYTHON:-${NT_VENV:-$HERE/.venv-nt}/bin/python}"
"$HERE/setup_nt.sh" >&2
exec "$KC_PYTHON" "$HERE/run.py" "$@"
