"""The references of tests/stax/test_nt_dropin.py: neural-tangents 0.6.5 in float64 on the
examples of tests/nt_examples.py, written to tests/fixtures/nt_examples.npz.

    bash bench/setup_nt.sh && bench/.venv-nt/bin/python bench/nt_examples.py
"""

import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
# neural_tangents/__init__.py imports .experimental, which needs TensorFlow
sys.modules["neural_tangents.experimental"] = types.ModuleType("neural_tangents.experimental")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import numpy as np  # noqa: E402
from neural_tangents import stax  # noqa: E402

from nt_examples import EXAMPLES, inputs, kernels  # noqa: E402


def main():
    out = {}
    for name, (example, _shape, get, _source) in EXAMPLES.items():
        x1, x2 = inputs(name)
        kernel_fn = example(stax)
        for kind, k in kernels(kernel_fn(x1, x2, get), get).items():
            out[f"{name}.{kind}"] = np.asarray(k, np.float64)
        print(name, {k: v.shape for k, v in out.items() if k.startswith(name + ".")})
    np.savez(ROOT / "tests" / "fixtures" / "nt_examples.npz", **out)


if __name__ == "__main__":
    main()
