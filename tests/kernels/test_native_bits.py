"""Golden bits: the native library's kernels of a few networks, as its identity computed
them (``tests/fixtures/native_bits.npz``), bit for bit, on every variant this CPU runs.

A run records its library's identity and resumes only with that identity, so the bits
of one identity must never move: the fixture holds them. A change of the sources or the
flags is a new identity: this test then fails until the fixture is made again, on
purpose, once the change is known to be meant (``python tests/kernels/test_native_bits.py
--write``). Runs started by the old identity are refused by the new one, never mixed.

Other variants are checked in a process of a copied package whose record lists that
variant only (``--check``), as a CPU with only its features loads it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "fixtures" / "native_bits.npz"
NAMES = ("seed", "valid", "filter_5x3", "standard_no_bias", "mixed_chain", "myrtle_like",
         "flatten", "pool_then_diagonal")


def kernels() -> dict:
    """``{"<net>/<dtype>/<kind>": array}`` by the native engine, with the identity."""
    from test_native import NETS

    from kernelcli import kernel_fn
    from kernelcli.kernels import native_library

    x = np.random.default_rng(7).standard_normal((5, 6, 6, 2))
    out = {"identity": np.array(native_library().identity)}
    for name in NAMES:
        kfn = kernel_fn(NETS[name])
        for dtype in ("float32", "float64"):
            got = kfn(x, get=("nngp", "ntk"), dtype=dtype, engine="native")
            for kind, a in zip(("nngp", "ntk"), got):
                out[f"{name}/{dtype}/{kind}"] = a
    return out


def differences(got: dict) -> list:
    """What differs from the fixture: names, or the identity."""
    with np.load(FIXTURE) as want:
        if str(want["identity"]) != str(got["identity"]):
            return [f"identity {got['identity']} (the fixture's: {want['identity']})"]
        return [k for k in want.files if k != "identity"
                and not np.array_equal(want[k], got[k])]


def _skip_unless_native():
    from kernelcli.kernels import native_unavailable

    if native_unavailable() is not None:
        pytest.skip(f"the native engine: {native_unavailable()}")


def test_the_fixture_is_this_librarys_and_its_bits_are_the_same():
    _skip_unless_native()
    assert differences(kernels()) == [], (
        "the native library's sources or flags changed, or its bits moved: if the change is "
        "meant, make the fixture again with `python tests/kernels/test_native_bits.py --write`")


@pytest.mark.slow
def test_every_variant_this_cpu_runs_gives_the_same_bits(tmp_path):
    from kernelcli.kernels import _native_recipe as recipe  # the variants and their record
    from kernelcli.kernels import native_library

    _skip_unless_native()
    for variant in recipe.cpu_variants():
        if variant == native_library().variant:
            continue  # the test above
        root = tmp_path / variant
        shutil.copytree(recipe.NATIVE.parent.parent, root / "kernelcli",
                        ignore=shutil.ignore_patterns("__pycache__"))
        record = root / "kernelcli" / "kernels" / "native" / recipe.RECORD
        rec = json.loads(record.read_text())
        rec["libraries"] = {variant: rec["libraries"][variant]}
        record.write_text(json.dumps(rec))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (root, HERE, HERE.parent))),
               "KERNELCLI_CACHE_DIR": "off"}
        proc = subprocess.run([sys.executable, __file__, "--check", variant], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    if sys.argv[1:] == ["--write"]:
        np.savez_compressed(FIXTURE, **kernels())
        print(f"wrote {FIXTURE}")
    elif sys.argv[1:2] == ["--check"]:
        from kernelcli.kernels import describe_native, native_library

        assert native_library().variant == sys.argv[2], describe_native()
        diff = differences(kernels())
        print(f"{describe_native()}: {diff or 'the same bits'}")
        sys.exit(1 if diff else 0)
    else:
        sys.exit("usage: python tests/kernels/test_native_bits.py --write | --check VARIANT")
