"""Whether two checkouts compute the same kernel bits (for kernel changes that must
leave the values alone).

    python bench/kernel_bits.py dump OUT.npz [--cases a,b] [--dtypes float32,float64]
    python bench/kernel_bits.py compare A.npz B.npz

``dump`` runs in a fresh process with ``PYTHONPATH`` at the checkout to test: for
every reference fixture (``tests/fixtures/*.yaml``, ``tests/fixtures/augment/*.yaml``,
their inputs) and every bench case (``bench/configs``, 3 inputs of 32x32x3, as
``bench/cases.make_inputs`` makes them) it evaluates ``kernel_matrix`` (compute's
route) in each dtype and saves every kind. ``compare`` prints each array that is not
``np.array_equal`` in the two files (and its largest difference relative to its
largest entry) and exits 1 if any is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
FIXTURES = BENCH.parent / "tests" / "fixtures"
sys.path.insert(0, str(BENCH))


def _cases():
    """(name, config path, x1, x2) of every fixture and bench case."""
    from cases import CASES, config_path, make_inputs
    from kernelcli.config import load_config

    for path in sorted(FIXTURES.glob("*.yaml")) + sorted((FIXTURES / "augment").glob("*.yaml")):
        data = load_config(path).data

        def rows(file, key):
            with np.load(file) as f:
                x = np.asarray(f[key], np.float64)
            return x if data.layout.endswith("C") else np.moveaxis(x, 1, -1)

        x2 = None if data.x2 is None else rows(data.x2, data.x2_key)
        yield path.stem, path, rows(data.x1, data.key or "x1"), x2
    for name in CASES:
        yield "bench_" + name, config_path(name), make_inputs(3), None


def dump(out: str, only, dtypes) -> None:
    from kernelcli.run import configure_host_devices

    configure_host_devices()
    from kernelcli.config import load_config
    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import kernel_matrix

    got = {}
    for name, path, x1, x2 in _cases():
        if only and name not in only:
            continue
        cfg = load_config(path)
        for dtype in dtypes:
            kfn = build_kernel_fn(cfg.architecture, x1.shape[1:], cfg.kernel.kinds, dtype,
                                  augment=cfg.kernel.augment)
            k = kernel_matrix(kfn, x1.astype(dtype), None if x2 is None else x2.astype(dtype))
            for kind, a in k.items():
                got[f"{name}/{dtype}/{kind}"] = a
        print(name, flush=True)
    np.savez(out, **got)


def compare(a: str, b: str) -> int:
    with np.load(a) as fa, np.load(b) as fb:
        keys = sorted(set(fa.files) | set(fb.files))
        bad = 0
        for k in keys:
            if k not in fa.files or k not in fb.files:
                print(f"{k}: only in {'A' if k in fa.files else 'B'}")
                bad += 1
                continue
            x, y = fa[k], fb[k]
            if not np.array_equal(x, y):
                bad += 1
                d = np.max(np.abs(x.astype(np.float64) - y)) / max(np.max(np.abs(x)), 1e-300)
                print(f"{k}: differs, max |A - B| / max |A| = {d:.3e}, "
                      f"{np.count_nonzero(x != y)} of {x.size} entries")
    print(f"{len(keys)} arrays, {bad} differ")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--cases", default="")
    d.add_argument("--dtypes", default="float32,float64")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    a = p.parse_args(argv)
    if a.cmd == "dump":
        dump(a.out, set(filter(None, a.cases.split(","))), a.dtypes.split(","))
        return 0
    return compare(a.a, a.b)


if __name__ == "__main__":
    sys.exit(main())
