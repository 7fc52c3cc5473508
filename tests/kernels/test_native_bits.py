"""Golden bits: the kernels of a few networks on the native engine, as its library's
identity computed them at each CPU level (``tests/fixtures/native_bits.npz``), bit for
bit, on every level and native variant this CPU runs.

A run records its library's identity and its CPU level (``engine.cpu_level``: XLA's
instruction set and OpenBLAS's kernels, ``kernels/_cpu_level.py``) and continues only
with both, so the bits of one identity at one level must never move, whatever CPU runs
them. The fixture holds the levels whose bits are the same on every CPU that runs them:
``x86-64-v3`` and ``x86-64-v2`` (``bench/cpu_bits.py`` compared this machine capped at
each with an emulated CPU of that level). ``x86-64-v4`` is not held: no second kind of
AVX-512 CPU has confirmed its bits. A change of the sources or the flags is a new
identity: these tests then fail until the fixture is made again, on purpose, once the
change is known to be meant (``python tests/kernels/test_native_bits.py --write``).

Each level runs in a process of its own, pinned to it (``KERNELCLI_CPU_LEVEL``) before
jax and numpy load, as the CLI pins it; a variant other than this CPU's best runs from
a copied package whose record lists that variant only, as a CPU with only its features
loads it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":  # a process of one level: pinned before jax and numpy load
    from kernelcli.kernels._cpu_level import pin

    pin()

import numpy as np  # noqa: E402
import pytest  # noqa: E402

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "fixtures" / "native_bits.npz"
NAMES = ("seed", "valid", "filter_5x3", "standard_no_bias", "mixed_chain", "myrtle_like",
         "flatten", "pool_then_diagonal")
WIDE = ("seed", "flatten")
LEVELS = ("x86-64-v3", "x86-64-v2")  # the levels the fixture holds (see above)


def kernels(level: str) -> dict:
    """``{"<level>/<net>/<dtype>/<kind>": array}`` by the native engine, with the
    library's identity; this process must compute at ``level``."""
    from test_native import NETS

    from kernelcli import kernel_fn
    from kernelcli.kernels import build_kernel_fn, cpu_level_in_force, native_library
    from kernelcli.run import kernel_matrix

    assert cpu_level_in_force() == level, cpu_level_in_force()
    rng = np.random.default_rng(7)
    small, wide = rng.standard_normal((5, 6, 6, 2)), rng.standard_normal((3, 11, 11, 2))
    large = rng.standard_normal((2, 18, 18, 2))
    out = {"identity": np.array(native_library().identity)}
    # every net on 6 x 6 inputs; the seed's and the flatten net's also on 11 x 11, whose
    # planes (143 entries) end in a part shorter than a loop iteration's vectors on every
    # variant, so the vector loop and the remainder's scalar code are held to one set of
    # bits; the seed's on 18 x 18 too, whose planes (360 entries) span two of the float32
    # loop's blocks of 256 where it runs in two passes (map.h's kTwoPass)
    for name, x in ([(n, small) for n in NAMES] + [(n, wide) for n in WIDE]
                    + [("seed", large)]):
        arch = kernel_fn(NETS[name]).architecture
        if x is not small:
            name = f"{name}_{x.shape[1]}x{x.shape[2]}"
        for dtype in ("float32", "float64"):
            # compute's route (a small library call's programs are compiled quick)
            kfn = build_kernel_fn(arch, x.shape[1:], ("nngp", "ntk"), dtype, (), "native")
            got = kernel_matrix(kfn, x.astype(dtype))
            for kind in ("nngp", "ntk"):
                out[f"{level}/{name}/{dtype}/{kind}"] = got[kind]
    return out


def differences(got: dict, level: str) -> list:
    """What differs from the fixture's bits at ``level``: names, or the identity."""
    with np.load(FIXTURE) as want:
        if str(want["identity"]) != str(got["identity"]):
            return [f"identity {got['identity']} (the fixture's: {want['identity']})"]
        return [k for k in want.files if k.startswith(f"{level}/")
                and not np.array_equal(want[k], got[k])]


def _runnable() -> tuple:
    from kernelcli.kernels import _cpu_level  # the levels this CPU runs

    return _cpu_level.runnable()


def _skip_unless_native():
    from kernelcli.kernels import native_unavailable

    if native_unavailable() is not None:
        pytest.skip(f"the native engine: {native_unavailable()}")


def _in_a_process(tmp_path, level: str, variant=None, *args) -> subprocess.CompletedProcess:
    """This file run at ``level``, from a copy of the package whose record lists only
    ``variant`` where one is given."""
    from kernelcli.kernels import _native_recipe as recipe  # the variants and their record

    path = [str(HERE), str(HERE.parent)]
    if variant is not None:
        root = tmp_path / variant
        shutil.copytree(recipe.NATIVE.parent.parent, root / "kernelcli",
                        ignore=shutil.ignore_patterns("__pycache__"))
        record = root / "kernelcli" / "kernels" / "native" / recipe.RECORD
        rec = json.loads(record.read_text())
        rec["libraries"] = {variant: rec["libraries"][variant]}
        record.write_text(json.dumps(rec))
        path.insert(0, str(root))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "KERNELCLI_CACHE_DIR": "off",
           "KERNELCLI_CPU_LEVEL": level}
    env.pop("XLA_FLAGS", None)  # the level's own instruction set, not this process's
    env.pop("OPENBLAS_CORETYPE", None)
    return subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_fixture_is_this_librarys_and_its_bits_are_the_same(tmp_path):
    """At x86-64-v3 (what AVX2 and AVX-512 CPUs both run) with this CPU's best variant."""
    _skip_unless_native()
    if LEVELS[0] not in _runnable():
        pytest.skip(f"this CPU does not run {LEVELS[0]}")
    proc = _in_a_process(tmp_path, LEVELS[0], None, "--check", LEVELS[0])
    assert proc.returncode == 0, (
        proc.stdout + proc.stderr + "\nthe native library's sources or flags changed, or "
        "its bits moved: if the change is meant, make the fixture again with "
        "`python tests/kernels/test_native_bits.py --write`")


@pytest.mark.slow
def test_every_level_this_cpu_runs_gives_the_fixtures_bits_with_its_own_variant(tmp_path):
    """Each level with the variant a CPU of that level loads: the bits of every CPU."""
    from kernelcli.kernels import _native_recipe as recipe

    _skip_unless_native()
    levels = [lv for lv in LEVELS if lv in _runnable()]
    assert levels, "no level of the fixture runs here"
    for level in levels:
        variant = level if level in recipe.cpu_variants() else None
        proc = _in_a_process(tmp_path, level, variant, "--check", level, variant or "")
        assert proc.returncode == 0, proc.stdout + proc.stderr


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    if sys.argv[1:] == ["--write"]:  # every level, each in a process of its own
        import tempfile

        found: dict = {}
        with tempfile.TemporaryDirectory() as tmp:
            for level in LEVELS:
                out = Path(tmp) / f"{level}.npz"
                proc = _in_a_process(Path(tmp), level, None, "--dump", level, str(out))
                if proc.returncode != 0:
                    sys.exit(proc.stdout + proc.stderr)
                with np.load(out) as got:
                    found.update({k: got[k] for k in got.files})
        np.savez_compressed(FIXTURE, **found)
        print(f"wrote {FIXTURE}: {', '.join(LEVELS)}")
    elif sys.argv[1:2] == ["--dump"]:
        np.savez(sys.argv[3], **kernels(sys.argv[2]))
    elif sys.argv[1:2] == ["--check"]:
        from kernelcli.kernels import describe_native, native_library

        if sys.argv[3:4] not in ([], [""]):
            assert native_library().variant == sys.argv[3], describe_native()
        diff = differences(kernels(sys.argv[2]), sys.argv[2])
        print(f"{describe_native()} at {sys.argv[2]}: {diff or 'the same bits'}")
        sys.exit(1 if diff else 0)
    else:
        sys.exit("usage: python tests/kernels/test_native_bits.py --write | "
                 "--check LEVEL [VARIANT] | --dump LEVEL OUT")
