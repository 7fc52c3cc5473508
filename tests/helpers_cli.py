"""Helpers for the end-to-end tests: small configs and data in tmp_path, the CLI as a
subprocess, and reading results back.

Nothing here is a test. The networks are the cheap ones the test plan asks for
(conv + relu + flatten/global_avg_pool + dense on 6x6 or 8x8 images).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import h5py
import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIGS_DIR = ROOT / "configs"
SQRT2 = 1.4142135623730951

# The console script the package installs (there is no `python -m kernelcli`).
KERNELCLI = shutil.which("kernelcli", path=os.path.dirname(sys.executable)) or os.path.join(
    os.path.dirname(sys.executable), "kernelcli")

FLATTEN_NET = [
    {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.1}},
    "relu",
    "flatten",
    {"dense": {"W_std": 1.0, "b_std": 0.0}},
]

GAP_NET = [
    {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.1}},
    "relu",
    "global_avg_pool",
    {"dense": {"W_std": 1.0, "b_std": 0.0}},
]

# Two conv layers before the pooling: about twice the work per pair of GAP_NET.
GAP2_NET = [
    {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.05}},
    "relu",
    {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.05}},
    "relu",
    "global_avg_pool",
    {"dense": {"W_std": 1.0, "b_std": 0.0}},
]


def images(n: int, h: int = 6, w: int = 6, c: int = 2, seed: int = 0,
           dtype=np.float32) -> np.ndarray:
    """``(n, h, w, c)`` standard-normal images."""
    return np.random.default_rng(seed).standard_normal((n, h, w, c)).astype(dtype)


def write_config(folder: Path, name: str = "cfg", *, x1="x.npy", key=None, x2=None,
                 x2_key=None, layout=None, limit=None, layers=None, parameterization=None,
                 kinds=None, dtype=None, compute: Optional[dict] = None,
                 run_dir="run", run_name: Optional[str] = None,
                 keep_tiles: Optional[bool] = None, readouts: Optional[dict] = None) -> Path:
    """Write ``folder/<name>.yaml`` and return its path. ``None`` leaves a key out."""
    data = {"x1": str(x1)}
    for k, v in (("key", key), ("x2", x2), ("x2_key", x2_key), ("layout", layout),
                 ("limit", limit)):
        if v is not None:
            data[k] = str(v) if k == "x2" else v
    arch = {"layers": layers if layers is not None else FLATTEN_NET}
    if parameterization is not None:
        arch["parameterization"] = parameterization
    if readouts is not None:
        arch["readouts"] = readouts
    doc = {"name": run_name or name, "data": data, "architecture": arch}
    kernel = {}
    if kinds is not None:
        kernel["kinds"] = list(kinds)
    if dtype is not None:
        kernel["dtype"] = dtype
    if kernel:
        doc["kernel"] = kernel
    if compute:
        doc["compute"] = dict(compute)
    if run_dir is not None:
        doc["output"] = {"run_dir": str(run_dir)}
    if keep_tiles is not None:
        doc.setdefault("output", {})["keep_tiles"] = keep_tiles
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cli_env(**extra) -> dict:
    """The environment for a CLI subprocess: the caller's, minus any XLA_FLAGS, so the
    CLI picks its own host device count (one per core)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def fresh_cache(folder: Path) -> dict:
    """``KERNELCLI_CACHE_DIR`` of a compilation cache of its own in ``folder``, so a run
    compiles afresh, as a first run does (the native library is the package's)."""
    return {"KERNELCLI_CACHE_DIR": str(folder)}


def run_cli(*args, cwd=None, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """Run ``kernelcli ARGS`` to completion; text stdout/stderr captured."""
    return subprocess.run([KERNELCLI, *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env or cli_env())


# A fresh, small helper process runs one command and reports its peak RSS. Linux
# carries the peak RSS of the process that forked a child into the child's own
# ru_maxrss (across exec: a forked child starts as large as its parent), so a big
# parent (pytest, after a test that held gigabytes) must not start the measured command
# directly. ``ballast`` MiB are allocated and touched in the helper first.
_MEASURE = r"""
import json, resource, subprocess, sys
ballast = b"x" * (int(sys.argv[1]) << 20)
r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
print(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr[-2000:],
                  "maxrss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def run_measured(args, env=None, ballast_mib: int = 0, cwd=None) -> tuple[int, str]:
    """``(peak RSS in bytes, stdout)`` of ``kernelcli ARGS`` started by a fresh helper;
    the command must succeed."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(ballast_mib), KERNELCLI,
                          *map(str, args)], capture_output=True, text=True,
                         env=env or cli_env(), cwd=cwd, timeout=900)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["rc"] == 0, got["stderr"]
    return got["maxrss_bytes"], got["stdout"]


def start_cli(*args, log_dir: Path, cwd=None, env=None,
              program: Optional[list] = None) -> subprocess.Popen:
    """Start ``kernelcli ARGS`` in the background, stdout/stderr to files in ``log_dir``
    (files, not pipes, so a chatty child never blocks on a full pipe). ``program``
    replaces the console script (``[sys.executable, "-c", CODE]``: the CLI started by a
    script that instruments it first)."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(log_dir.glob("*.out")))
    out = open(log_dir / f"{n:03d}.out", "w")
    err = open(log_dir / f"{n:03d}.err", "w")
    proc = subprocess.Popen([*(program or [KERNELCLI]), *map(str, args)], cwd=cwd,
                            stdout=out, stderr=err, env=env or cli_env())
    proc.log_paths = (log_dir / f"{n:03d}.out", log_dir / f"{n:03d}.err")
    proc._files = (out, err)
    return proc


# The CLI started by a script that holds the process once it has published its
# ``after``-th tile under the tile's final name (the rename that completes a tile), and
# says so on stderr: a test kills it there, sure that the run is mid-way however fast
# the machine computes the tiles left (they take milliseconds each).
_HOLD_AFTER_TILES = """
import os, re, sys, time
after, published = int(sys.argv[1]), [0]
replace = os.replace
def replace_then_hold(src, dst, *args, **kwargs):
    replace(src, dst, *args, **kwargs)
    if re.fullmatch(r"r[0-9]+c[0-9]+[.]h5", os.path.basename(os.fsdecode(dst))):
        published[0] += 1
        if published[0] == after:
            os.write(2, b"held: tile published\\n")
            time.sleep(600)
os.replace = replace_then_hold
sys.argv = ["kernelcli", *sys.argv[2:]]
from kernelcli._entry import main  # the console script's entry point
sys.exit(main())
"""


def start_held(*args, after: int, log_dir: Path, cwd=None, env=None) -> subprocess.Popen:
    """:func:`start_cli` of a CLI that holds once it has published ``after`` tiles;
    :func:`wait_held` waits for that."""
    return start_cli(*args, log_dir=log_dir, cwd=cwd, env=env,
                     program=[sys.executable, "-c", _HOLD_AFTER_TILES, str(after)])


def stderr_says(proc: subprocess.Popen, text: str) -> bool:
    """Whether a process from :func:`start_cli` has written ``text`` on stderr so far."""
    return text in proc.log_paths[1].read_text()


def wait_held(proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until a process from :func:`start_held` holds; fail the test if it ends
    first or never does."""
    assert wait_until(lambda: stderr_says(proc, "held: tile published"), proc, timeout), (
        f"the process ended or went on without publishing its tiles: "
        f"{proc.log_paths[1].read_text()[-2000:]}")


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """Wait for a process from :func:`start_cli`; return ``(rc, stdout, stderr)``."""
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in proc._files:
            f.close()
    out, err = (p.read_text() for p in proc.log_paths)
    return rc, out, err


def tile_names(run_dir: Path) -> set[str]:
    """Names of the completed tiles (final names only, no temporary files)."""
    tiles = Path(run_dir) / "tiles"
    try:
        return {p.name for p in tiles.iterdir()
                if p.name.endswith(".h5") and not p.name.startswith(".")}
    except FileNotFoundError:
        return set()


def wait_until(predicate, proc: Optional[subprocess.Popen] = None, timeout: float = 300,
               poll: float = 0.002) -> bool:
    """Poll ``predicate`` until it holds (True) or ``proc`` exits or time runs out (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(poll)
    return False


def edit_manifest(run, change, rechecksum=False):
    """``change`` the JSON object of ``run``'s manifest in place; ``rechecksum``: with
    its checksum renewed (as kernelcli writes it: sorted keys, indent 2), so what is
    refused is the content, not the checksum."""
    m = json.loads((run / "manifest.json").read_text())
    change(m)
    if rechecksum:
        m.pop("checksum")
        body = json.dumps(m, sort_keys=True, indent=2) + "\n"
        m["checksum"] = hashlib.sha256(body.encode()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(m, sort_keys=True, indent=2) + "\n")


def manifest_of_format_2(m: dict) -> dict:
    """``m`` (a manifest's JSON object, changed in place and returned) as kernelcli wrote
    it before the engine had a section of its own (format 2): the engine's name as
    ``plan.engine``, the native engine's revision as ``plan.native`` (written from
    revision 2 on) and its library as ``plan.native_library``."""
    engine = m.pop("engine")
    m["format"] = 2
    m["plan"]["engine"] = engine["name"]
    if engine.get("native_revision", 1) > 1:
        m["plan"]["native"] = engine["native_revision"]
    if "native_library" in engine:
        m["plan"]["native_library"] = engine["native_library"]
    return m


def read_kernels(path: Path) -> tuple[dict, dict]:
    """``({dataset: array}, {attr: value})`` of a ``kernels.h5``."""
    with h5py.File(path, "r") as f:
        arrays = {k: f[k][...] for k in f.keys()}
        attrs = {k: f.attrs[k] for k in f.attrs.keys()}
    return arrays, attrs


def read_tile_file(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {k: f[k][...] for k in f.keys()}


def assert_bit_identical(got: dict, want: dict) -> None:
    """Same dataset names, dtypes, shapes and bits."""
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].shape == want[k].shape, k
        assert np.array_equal(got[k], want[k]), (
            f"{k}: {np.count_nonzero(got[k] != want[k])} entries differ, max abs diff "
            f"{np.max(np.abs(got[k].astype(np.float64) - want[k]))}")


def snapshot(folder: Path) -> dict:
    """``{relative path: bytes}`` of every file under ``folder`` (to prove nothing changed)."""
    folder = Path(folder)
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def invoke(*args):
    """``kernelcli ARGS`` in-process (click's CliRunner): the result, with stdout and
    stderr apart. An exception that escaped the CLI (a traceback for a real user)
    fails the test."""
    from click.testing import CliRunner

    from kernelcli.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"kernelcli {' '.join(map(str, args))} raised "
                             f"{result.exception!r}; stderr: {result.stderr}") \
            from result.exception
    assert "Traceback" not in result.output
    return result


def error_line(result) -> str:
    """The one ``Error: ...`` line of a failed command (and nothing on stdout)."""
    assert result.stdout == ""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@contextlib.contextmanager
def small_filesystem(where, options):
    """A real tiny (or read-only) tmpfs; skips where mounting is not allowed."""
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
            capture_output=True).returncode != 0:
        pytest.skip("needs permission to mount a tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
