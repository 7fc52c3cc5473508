"""The first call of ``kernel_fn``, compilation included, kernelcli against neural-tangents
with where each tool's first call spends its time.

    python bench/first_call.py [--n 8] [--depth 3] [--rounds 3] [--old CHECKOUT]
    python bench/first_call.py --example wrn --n 3 --dtype float64 [--warm]

``--example``: instead of the conv network below, one of the examples users start from
(:data:`EXAMPLES`: neural-tangents' README fully connected network, its WideResNet with
``block_size`` 2 and ``k`` 1 on 8 x 8 x 3 images, ending in a 2 x 2 average pool and
flatten as the README's does, or in a global average pool, and Myrtle-5 on 32 x 32 x 3),
the README's ``kernel_fn(x1, None)`` (both kinds), and the whole process timed as well
(``process s``: from its start to its exit, imports and Python's start-up included).
``--warm``: kernelcli's rounds run twice, each process calling
``kernelcli.enable_compile_cache()`` first (as docs/python-api.md tells a script to), the
second with the cache folder the first left (``kernelcli (cache warm)``): a user's second
process on the same machine.

The network: ``depth`` x (3x3 SAME conv, W_std sqrt 2, b_std 0; ReLU), flatten, dense,
on ``(n, 32, 32, 3)`` float32 inputs (``cases.make_inputs``). Each round runs, in fresh
processes and in turn, kernelcli's ``kernelcli.stax`` ``kernel_fn(x, None, ('nngp',
'ntk'))`` with JAX's persistent compilation cache off and ``KERNELCLI_CACHE_DIR`` a fresh
folder that holds only the native engine's library, built there once before the rounds
and untimed (as a machine has it after its first native run: the build, 10-45 s, is once
per machine, not per call; ``--no-native-library``: the folder empty, so a kernelcli
whose ``auto`` takes the native engine builds it in its first call), the same from the checkout ``--old`` (e.g. ``/work/main``: its
``kernelcli`` first on the path) when given, and neural-tangents 0.6.5's
``jax.jit(kernel_fn)`` called the same way (``bench/.venv-nt``, or ``NT_VENV``).

Every tool's modules are byte-compiled before the rounds (one untimed process each,
writing to a private ``PYTHONPYCACHEPREFIX``), as an installed package's are: without
it a checkout run with ``PYTHONDONTWRITEBYTECODE`` recompiles kernelcli's sources in
every first call (0.17 s here).

Each worker prints its import seconds (jax and the tool's stax), the first call's wall
and CPU seconds, and JAX's own account of each program the call compiled
(``jax_log_compiles``): seconds tracing, lowering to MLIR and in XLA's compiler, by
program, and how many XLA compilations a program had where more than one; ``other``
is the rest of the call (lazy imports, planning, running the programs, Python). The
driver prints the best round of each tool (by CPU seconds: the machine may be shared;
wall alongside), the ratios to neural-tangents, and the breakdowns. Neither tool has a
warm cache here: this is what a user's first call in a new process costs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SQRT2 = 2.0 ** 0.5
# JAX's compile log, 0.4.30 and 0.10.x: "Finished tracing [+ transforming] NAME for jit
# in S sec", "Finished jaxpr to MLIR module conversion jit(NAME) in S sec", "Finished
# XLA compilation of jit(NAME) in S sec"
PHASES = (("trace", re.compile(r"Finished tracing (?:\+ transforming )?(\S+) for \w+ "
                               r"in (\S+) sec")),
          ("lower", re.compile(r"Finished jaxpr to MLIR module conversion \w+\((\S+)\) "
                               r"in (\S+) sec")),
          ("compile", re.compile(r"Finished XLA compilation of \w+\((\S+)\) in (\S+) sec")))
# programs of less than this in all are eager operations (one op each), counted together
EAGER_S = 0.005


class CompileLog(logging.Handler):
    """JAX's compile log of one call: seconds per program and phase."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []  # (program, phase, seconds, when it ended)

    def emit(self, record):
        message = record.getMessage()
        for phase, pattern in PHASES:
            m = pattern.search(message)
            if m:
                self.records.append((m.group(1), phase, float(m.group(2)), record.created))

    def outermost(self):
        """The records less traces inside another trace (jax 0.4.30 logs each ``jnp``
        function a program calls as a nested ``pjit`` trace)."""
        spans = [(end - s, end) for _, phase, s, end in self.records if phase == "trace"]
        def nested(s, end):
            return any(a <= end - s and end <= b and (a, b) != (end - s, end) for a, b in spans)

        return [(name, phase, s) for name, phase, s, end in self.records
                if phase != "trace" or not nested(s, end)]

    def install(self, jax):
        jax.config.update("jax_log_compiles", True)
        for name in ("jax._src.dispatch", "jax._src.interpreters.pxla", "jax._src.pjit",
                     "jax._src.compiler"):
            logger = logging.getLogger(name)
            logger.addHandler(self)
            logger.setLevel(logging.DEBUG)
            logger.propagate = False

    def programs(self) -> dict:
        """``{program: {phase: seconds}}``, eager operations summed under ``eager ops``
        (with ``count``, the programs compiled for them)."""
        out: dict = {}
        for name, phase, s in self.outermost():
            out.setdefault(name, {}).setdefault(phase, 0.0)
            out[name][phase] += s
            if phase == "compile":  # one per device it ran on, before run.compute_streams
                out[name]["compilations"] = out[name].get("compilations", 0) + 1
        eager = {"trace": 0.0, "lower": 0.0, "compile": 0.0, "count": 0}
        for name in [n for n, p in out.items()
                     if "compile" in p and p["compile"] + p.get("trace", 0)
                     + p.get("lower", 0) < EAGER_S]:
            phases = out.pop(name)
            eager["count"] += 1
            for k, v in phases.items():
                if k != "compilations":
                    eager[k] += v
        traced_only = [n for n, p in out.items() if "compile" not in p]
        for name in traced_only:  # traced, not compiled: eval_shape, or a nested jit
            for k, v in out.pop(name).items():
                out.setdefault("traced only", {}).setdefault(k, 0.0)
                out["traced only"][k] += v
        if eager["count"]:
            out["eager ops"] = eager
        return out


def _wrn(stax, pool: str):
    """neural-tangents' README WideResNet, ``block_size`` 2, ``k`` 1, ending in ``pool``:
    ``"avg"`` (a 2 x 2 average pool, what its 8 x 8 one is on 8 x 8 inputs, and flatten)
    or ``"gap"`` (a global average pool)."""
    def block(channels, strides=(1, 1), mismatch=False):
        main = stax.serial(stax.Relu(), stax.Conv(channels, (3, 3), strides, padding="SAME"),
                           stax.Relu(), stax.Conv(channels, (3, 3), padding="SAME"))
        short = (stax.Conv(channels, (3, 3), strides, padding="SAME") if mismatch
                 else stax.Identity())
        return stax.serial(stax.FanOut(2), stax.parallel(main, short), stax.FanInSum())

    def group(n, channels, strides=(1, 1)):
        return stax.serial(block(channels, strides, True),
                           *[block(channels) for _ in range(n - 1)])

    end = ((stax.AvgPool((2, 2)), stax.Flatten()) if pool == "avg"
           else (stax.GlobalAvgPool(),))
    return stax.serial(stax.Conv(16, (3, 3), padding="SAME"), group(2, 16),
                       group(2, 32, (2, 2)), group(2, 64, (2, 2)), *end,
                       stax.Dense(10, 1.0, 0.0))[2]


def _myrtle5(stax):
    conv = (stax.Conv(1, (3, 3), W_std=SQRT2, b_std=0.0, padding="SAME"), stax.Relu())
    pool = stax.AvgPool((2, 2), strides=(2, 2))
    return stax.serial(*conv, *conv, pool, *conv, pool, *conv, pool,
                       *[pool] * 2, stax.Flatten(), stax.Dense(10, SQRT2, 0.0))[2]


# name -> (kernel_fn of a stax module, one example's shape)
EXAMPLES = {
    "fc": (lambda stax: stax.serial(stax.Dense(512), stax.Relu(), stax.Dense(512),
                                    stax.Relu(), stax.Dense(1))[2], (12,)),
    "wrn": (lambda stax: _wrn(stax, "avg"), (8, 8, 3)),
    "wrn_gap": (lambda stax: _wrn(stax, "gap"), (8, 8, 3)),
    "myrtle5": (_myrtle5, (32, 32, 3)),
}


def worker(tool: str, n: int, depth: int, example=None, dtype="float32",
           cache: bool = False) -> None:
    t0 = time.perf_counter()
    if cache:
        import kernelcli

        kernelcli.enable_compile_cache()
    sys.path.insert(0, str(BENCH))
    from cases import make_inputs

    if tool == "nt":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        # neural_tangents.experimental needs TensorFlow; stax does not use it
        sys.modules["neural_tangents.experimental"] = types.ModuleType(
            "neural_tangents.experimental")
        import jax
        from neural_tangents import stax
    else:
        import jax

        from kernelcli import stax
    if tool == "nt":
        jax.config.update("jax_enable_compilation_cache", False)
        jax.config.update("jax_enable_x64", dtype == "float64")
    if example is not None:
        make, shape = EXAMPLES[example]
        kernel_fn = make(stax)
        import numpy as np

        x = np.random.default_rng(0).standard_normal((n, *shape)).astype(dtype)
    else:
        layers = [stax.Conv(1, (3, 3), padding="SAME", W_std=SQRT2, b_std=0.0), stax.Relu()]
        _, _, kernel_fn = stax.serial(*(layers * depth), stax.Flatten(),
                                      stax.Dense(1, SQRT2, 0.0))
        x = make_inputs(n).astype(dtype)
    if tool == "nt":
        kernel_fn = jax.jit(kernel_fn, static_argnames="get")
    imported = time.perf_counter() - t0
    log = CompileLog()
    log.install(jax)
    c0, t0 = cpu_seconds(), time.perf_counter()
    out = kernel_fn(x, None, ("nngp", "ntk"))
    jax.block_until_ready(tuple(out))
    first = time.perf_counter() - t0
    print(json.dumps({"tool": tool, "import_s": imported, "first_s": first,
                      "first_cpu_s": cpu_seconds() - c0, "jax": jax.__version__,
                      "programs": log.programs()}), flush=True)


def cpu_seconds() -> float:
    """User + system seconds of this process, all threads: on a machine shared with
    other work a compilation's wall time is mostly waiting for a core."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(tool: str, n: int, depth: int, checkout=None, pycache=None, cache="off",
        example=None, dtype="float32", enable_cache: bool = False) -> dict:
    """One fresh worker process; ``tool``: ``kc`` (``checkout``'s kernelcli first on
    the path, default this one's) or ``nt``; ``cache``: kernelcli's cache folder."""
    if tool == "nt":
        venv = Path(os.environ.get("NT_VENV", BENCH / ".venv-nt"))
        python = str(venv / "bin" / "python")
    else:
        python = sys.executable
    env = {**os.environ, "KERNELCLI_CACHE_DIR": str(cache),
           "JAX_ENABLE_COMPILATION_CACHE": "false"}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout)] + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    extra = (["--example", example] if example else []) + (
        ["--enable-cache"] if enable_cache else [])
    t0 = time.perf_counter()
    out = subprocess.run([python, __file__, "--worker", "kc" if tool != "nt" else "nt",
                          "--n", str(n), "--depth", str(depth), "--dtype", dtype, *extra],
                         env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["tool"], got["process_s"] = tool, time.perf_counter() - t0
    return got


def breakdown(got: dict) -> str:
    """``program trace/lower/compile s`` items of a worker's result, and ``other``."""
    items, spent = [], 0.0
    for name, p in got["programs"].items():
        s = sum(v for k, v in p.items() if k not in ("count", "compilations"))
        spent += s
        count = f" x{p['count']}" if "count" in p else ""
        if p.get("compilations", 1) > 1:
            count += f" ({p['compilations']} compilations)"
        items.append(f"{name}{count} {p.get('trace', 0):.3f}/{p.get('lower', 0):.3f}/"
                     f"{p.get('compile', 0):.3f}")
    items.append(f"other {got['first_s'] - spent:.3f}")
    return "; ".join(items)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--old", type=Path, help="a checkout of kernelcli measured beside this one")
    p.add_argument("--no-native-library", action="store_true",
                   help="kernelcli's cache folder empty: a first call that takes the native "
                        "plan builds its library")
    p.add_argument("--example", choices=sorted(EXAMPLES))
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--warm", action="store_true",
                   help="also kernelcli's second process, with the cache its first left")
    p.add_argument("--worker", choices=("kc", "nt"), help=argparse.SUPPRESS)
    p.add_argument("--enable-cache", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.worker, a.n, a.depth, a.example, a.dtype, a.enable_cache)
        return
    tools: dict = {"kc": None, "nt": None}
    if a.old is not None:
        tools = {"kc": None, "kc-old": a.old.resolve(), "nt": None}
    if a.warm:
        tools = {"kc": None, "kc-warm": None, **{k: v for k, v in tools.items() if k != "kc"}}
    names = {"kc": "kernelcli", "kc-old": f"kernelcli ({a.old})", "nt": "neural-tangents",
             "kc-warm": "kernelcli (cache warm)"}
    best: dict = {t: None for t in tools}
    with tempfile.TemporaryDirectory(prefix="first-call-pyc-") as pycache, \
            tempfile.TemporaryDirectory(prefix="first-call-cache-") as cache:
        for tool, checkout in tools.items():  # byte-compile each tool's modules, untimed
            run(tool, a.n, a.depth, checkout, pycache, cache, a.example, a.dtype)
        native = Path(cache) / "kernelcli-native"  # the library, built once (as a machine has it)
        for _ in range(a.rounds):
            for tool, checkout in tools.items():
                for entry in Path(cache).iterdir():  # cold: only the library is kept
                    if tool != "kc-warm" and entry != native:
                        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                if a.no_native_library and native.exists():
                    shutil.rmtree(native)
                got = run(tool, a.n, a.depth, checkout, pycache, cache, a.example, a.dtype,
                          a.warm and tool in ("kc", "kc-warm"))
                print(json.dumps(got), flush=True)
                if best[tool] is None or got["first_cpu_s"] < best[tool]["first_cpu_s"]:
                    best[tool] = got
    nt = best["nt"]
    what = (f"{a.example}" if a.example else
            f"{a.depth} x (conv 3x3 + relu), flatten, dense")
    print(f"\n{what}; N = {a.n}, {a.dtype}; best of {a.rounds} by CPU seconds\n")
    print("| tool | jax | process s | import s | first call s | first call CPU s "
          "| process / NT | first call / NT |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for tool, got in best.items():
        print(f"| {names[tool]} | {got['jax']} | {got['process_s']:.2f} | {got['import_s']:.2f} "
              f"| {got['first_s']:.2f} | {got['first_cpu_s']:.2f} "
              f"| {got['process_s'] / nt['process_s']:.2f} "
              f"| {got['first_s'] / nt['first_s']:.2f} |")
    print("\nfirst call, s: program trace/lower/compile (JAX's compile log)")
    for tool, got in best.items():
        print(f"- {names[tool]}: {breakdown(got)}")


if __name__ == "__main__":
    main()
