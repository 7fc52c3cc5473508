#!/usr/bin/env bash
# The wheel as a user without a compiler gets it: `pip wheel .`, installed in a fresh
# virtual environment, run on a PATH that holds no C++ compiler. Computes the seed's
# network (configs/seed_gap.yaml's architecture) on N random 32 x 32 x 3 images with
# compute.engine: auto, prints estimate's and -v's engine lines and the
# compute's wall time.
#
#     bash bench/wheel.sh [N]        (default N 200; a few minutes, most of it the build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-200}
work=$(mktemp -d /tmp/kernelcli-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel --quiet --no-deps -w "$work/dist" "$root"
ls "$work"/dist
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "$work"/dist/kernelcli-*.whl
mkdir "$work/bin"
ln -s "$work/venv/bin/kernelcli" "$work/bin/kernelcli"
"$work/venv/bin/python" - "$work" "$n" "$root/configs/seed_gap.yaml" <<'EOF'
import sys
from pathlib import Path

import numpy as np
import yaml

work, n, seed = Path(sys.argv[1]), int(sys.argv[2]), yaml.safe_load(open(sys.argv[3]))
np.save(work / "x.npy", np.random.default_rng(0).standard_normal((n, 32, 32, 3),
                                                                  dtype=np.float32))
doc = {"name": "wheel", "data": {"x1": str(work / "x.npy")},
       "architecture": seed["architecture"], "kernel": seed["kernel"],
       "output": {"run_dir": str(work / "run")}}
(work / "c.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
EOF
export KERNELCLI_CACHE_DIR=off
nocc() { PATH="$work/bin" "$@"; }  # a command on a PATH with no compiler on it
for c in g++ c++ cc gcc clang; do
  if nocc command -v "$c" >/dev/null; then echo "a compiler is on PATH: $c"; exit 1; fi
done
nocc kernelcli estimate "$work/c.yaml" | grep -E "^  engine[ :]"
start=$(date +%s.%N)
nocc kernelcli compute "$work/c.yaml" -v 2>&1 | grep -E "^  engine[ :]"
end=$(date +%s.%N)
echo "compute of N $n: $("$work/venv/bin/python" -c 'import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))' "$end" "$start") s wall"
lib=$("$work/venv/bin/python" -c 'import kernelcli.kernels._native_recipe as r; print(r.NATIVE)')
echo "the wheel's libraries beside this checkout's (sha256):"
(cd "$lib" && sha256sum ./*.so) | sort > "$work/wheel.sums"
(cd "$root/kernelcli/kernels/native" && sha256sum ./*.so 2>/dev/null) | sort > "$work/tree.sums" || true
paste -d' ' "$work/wheel.sums" "$work/tree.sums" | awk '{print $2, ($1 == $3 ? "same bytes" : "other bytes")}'
