"""The bench cases through ``compute`` on this machine's accelerator, both plans.

    python bench/gpu.py [--cases myrtle5,fc2] [--engines cpu,accelerator] [--report F]

Each (case, engine) is one fresh process (``--one``) that writes the case's inputs
(``cases.make_inputs``) as a .npy file and runs :func:`kernelcli.run.compute`, the
function ``kernelcli compute`` calls, on the case's bench config with ``data.x1``,
``compute.engine``, ``compute.block`` and ``output.run_dir`` set, into a fresh run
directory; the progress callback notes (seconds, pairs) after every batch. Reported:

* ``ms/entry``: steady state, from the pairs done after the first block to the last
  batch, over that time (compilation and the first block's batches left out);
* ``wall``: the whole ``compute`` call, compile and assembly included;
* ``device peak``: the device's ``peak_bytes_in_use`` (none on CPU);
* ``GB/s`` and ``of BW``: the cost model's bytes per entry (bench/run.py's
  ``traffic``) over ``ms/entry``, against the device's copy bandwidth (a jax copy,
  read + write, measured in the same run).

``li2019`` (``configs/cifar10_li2019.yaml``'s network, random-patch features and flips, on
N random 32 x 32 x 3 images) reports its features apart: ``mapping s`` is the host's fit
and one mapping of every input (what a run with features kept once would spend), timed
in the same process before ``compute``, whose wall time maps the rows it reads again.

The output is one markdown table on stdout (and ``--report``); the raw rows go to
``--report`` with ``.json``. NT on the same GPU needs jax 0.4.30 with CUDA wheels,
which a machine without a package registry cannot install: bench/gpu.sh says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from cases import case_config, case_patches, device_peak_bytes, make_inputs  # noqa: E402

# name -> (N, block edge of the cpu engine, of the accelerator engine): enough blocks that
# the steady state is several blocks long (the accelerator engine's blocks larger, so its
# pair batches are: the planner sizes them by the block), few enough entries that the
# whole table stays within a few minutes on one H200.
GPU_CASES = {
    "cnn21_gap": (48, 8, 16),
    "cnn5_gap": (96, 16, 32),
    "myrtle5": (128, 16, 32),
    "cnn21_flatten": (256, 32, 64),
    "cnn5_flatten": (512, 64, 128),
    "fc2": (4096, 512, 512),
    "li2019": (64, 8, 16),
}


def _config(case: str, engine: str, n: int, block: int, work: Path) -> Path:
    cfg = case_config(case)
    x = work / "inputs.npy"
    np.save(x, make_inputs(n))
    cfg["data"]["x1"] = str(x)
    cfg["compute"]["block"] = block
    if engine != "default":
        cfg["compute"]["engine"] = engine
    cfg["output"]["run_dir"] = str(work / "run")
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def one(case: str, engine: str) -> dict:
    """Run one (case, engine) in this process; the measurement as a dict."""
    import jax

    from kernelcli.run import compute

    n, cpu_block, acc_block = GPU_CASES[case]
    block = acc_block if engine == "accelerator" else cpu_block
    seen = []

    def progress(p) -> None:
        seen.append((time.perf_counter(), p.pairs_this_run, p.blocks_done))

    mapping = _mapping_seconds(case, n)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(case, engine, n, block, Path(tmp))
        t0 = time.perf_counter()
        compute(cfg, progress=progress)
        wall = time.perf_counter() - t0
    after_first = [s for s in seen if s[2] >= 1]
    start, end = after_first[0], seen[-1]
    steady = (end[0] - start[0]) / max(1, end[1] - start[1]) if end[1] > start[1] else None
    return {"case": case, "engine": engine, "n": n, "block": block, "wall_s": wall,
            "entries": n * (n + 1) // 2, "ms_per_entry": None if steady is None else steady * 1e3,
            "steady_pairs": end[1] - start[1], "device_peak": device_peak_bytes(jax),
            "platform": jax.devices()[0].platform, "device": jax.devices()[0].device_kind,
            "mapping_s": mapping}


def _mapping_seconds(case: str, n: int):
    """The host's fit of ``case``'s random patches and one mapping of its ``n`` inputs,
    in seconds (``None`` for a case without them)."""
    from kernelcli.data import fit_preprocess

    patches = case_patches(case)
    if patches is None:
        return None
    settings, zca_reg = patches
    x = make_inputs(n).astype(np.float64)
    t = time.perf_counter()
    pp = fit_preprocess(x, "random_patches", zca_reg=zca_reg, patches=settings)
    pp.apply(x)
    return time.perf_counter() - t


def jax_copy_bandwidth(mib: int = 1024) -> float:
    import jax
    import jax.numpy as jnp

    x = jnp.ones((mib * 2**20 // 4,), jnp.float32)
    f = jax.jit(lambda a: a + 1.0)
    f(x).block_until_ready()
    best = float("inf")
    for _ in range(10):
        t = time.perf_counter()
        f(x).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * x.nbytes / best


def bytes_per_entry(case: str) -> float:
    """The cost model's bytes per kernel entry (bench/run.py's ``traffic``)."""
    from run import traffic

    return traffic(case)[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default=",".join(GPU_CASES))
    p.add_argument("--engines", default="cpu,accelerator")
    p.add_argument("--timeout", type=float, default=120, help="seconds per (case, engine)")
    p.add_argument("--report", type=Path, default=None)
    p.add_argument("--one", nargs=2, metavar=("CASE", "ENGINE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(*a.one)), flush=True)
        return
    bw = jax_copy_bandwidth()
    rows = []
    for case in a.cases.split(","):
        for engine in a.engines.split(","):
            t = time.perf_counter()
            try:
                r = subprocess.run([sys.executable, __file__, "--one", case, engine],
                                   capture_output=True, text=True, timeout=a.timeout)
                got = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {
                    "error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
            except subprocess.TimeoutExpired:
                got = {"error": f"timed out after {a.timeout:.0f} s"}
            got.update(case=case, engine=engine)
            rows.append(got)
            print(f"# {case} {engine}: {time.perf_counter() - t:.1f} s {json.dumps(got)}",
                  file=sys.stderr, flush=True)
    lines = [f"copy bandwidth (jax, read + write): {bw / 1e9:.0f} GB/s", "",
             "| case | engine | N | ms/entry | wall s | mapping s | device peak | GB/s | of BW |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['engine']} | | error: {r['error']} | | | | | |")
            continue
        ms = r["ms_per_entry"]
        try:
            gbs = bytes_per_entry(r["case"]) / (ms / 1e3) / 1e9 if ms else None
        except Exception:  # noqa: BLE001 - the model is a report column, not a gate
            gbs = None
        peak, mapping = r["device_peak"], r.get("mapping_s")
        lines.append(
            f"| {r['case']} | {r['engine']} | {r['n']} | "
            f"{'' if ms is None else f'{ms:.4f}'} | {r['wall_s']:.1f} | "
            f"{'' if mapping is None else f'{mapping:.2f}'} | "
            f"{'' if peak is None else f'{peak / 2**30:.2f} GiB'} | "
            f"{'' if gbs is None else f'{gbs:.0f}'} | "
            f"{'' if gbs is None else f'{gbs * 1e9 / bw:.0%}'} |")
    text = "\n".join(lines)
    print(text)
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(text + "\n")
        a.report.with_suffix(".json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
