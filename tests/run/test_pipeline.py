"""End to end: config + data file -> tiles -> kernels.h5 equals the engine on the whole
data at once; inputs in every accepted form give the same result; the seed case
(10,000 CIFAR-sized images through a pooling net) is plannable.
"""

from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest

from helpers_cli import (
    FLATTEN_NET,
    GAP_NET,
    cli_env,
    images,
    invoke,
    read_kernels,
    run_cli,
    tile_names,
    write_config,
)
from kernelcli.config import load_config
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

TiB = 1 << 40


pytestmark = pytest.mark.usefixtures("keep_process_state")




def compute_ok(cfg, *extra):
    result = invoke("compute", cfg, "--quiet", *extra)
    assert result.exit_code == 0, result.stderr
    return result


def engine_matrix(cfg_path, x, x2=None, run_dir=None):
    """``kernel_matrix`` of the config's network; with ``run_dir``, with that run's engine
    and on its plan (block and pair batch)."""
    cfg = load_config(cfg_path)
    plan, engine = {}, "cpu"
    if run_dir is not None:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        plan = {"block": manifest["plan"]["block"], "pair_batch": manifest["plan"]["pair_batch"]}
        engine = manifest["engine"]["name"]
    kfn = build_kernel_fn(cfg.architecture, x.shape[1:], cfg.kernel.kinds, cfg.kernel.dtype,
                          engine=engine)
    return kernel_matrix(kfn, x, x2, **plan)


# --------------------------------------------------------------------------- tiled == whole

@pytest.mark.slow
def test_multi_block_float64_run_equals_the_engine_on_the_whole_data(tmp_path):
    x = images(21, seed=11, dtype=np.float64)    # block 8: 3 block rows, ragged last one
    np.save(tmp_path / "x.npy", x)
    cfg = write_config(tmp_path, "c", layers=GAP_NET, dtype="float64", compute={"block": 8},
                       keep_tiles=True)
    compute_ok(cfg)
    assert len(tile_names(tmp_path / "run")) == 6
    got, _ = read_kernels(tmp_path / "run" / "kernels.h5")
    want = engine_matrix(cfg, x, run_dir=tmp_path / "run")
    for k in ("nngp", "ntk"):
        assert got[k].dtype == np.float64
        assert np.array_equal(got[k], want[k]), k  # one route: the same bits


def test_multi_block_float32_rectangular_run_equals_the_engine(tmp_path):
    x1 = images(19, seed=12)
    x2 = images(10, seed=13)
    np.save(tmp_path / "x1.npy", x1)
    np.save(tmp_path / "x2.npy", x2)
    cfg = write_config(tmp_path, "c", x1="x1.npy", x2="x2.npy", layers=FLATTEN_NET,
                       compute={"block": 8})
    compute_ok(cfg)
    got, _ = read_kernels(tmp_path / "run" / "kernels.h5")
    want = engine_matrix(cfg, x1, x2, run_dir=tmp_path / "run")
    for k in ("nngp", "ntk"):
        assert got[k].shape == (19, 10) and got[k].dtype == np.float32
        assert np.array_equal(got[k], want[k]), k  # one route: the same bits


@pytest.mark.parametrize("layers", [GAP_NET, FLATTEN_NET], ids=["gap", "flatten"])
def test_kernel_matrix_is_bit_for_bit_what_compute_writes(tmp_path, layers):
    """``kernel_matrix`` (what the benchmarks time) runs ``compute``'s route: on the run's
    plan, float32, the same bits as the run's kernels.h5."""
    x = images(13, seed=17)
    np.save(tmp_path / "x.npy", x)
    cfg = write_config(tmp_path, "c", layers=layers, compute={"block": 8})
    compute_ok(cfg)
    got, _ = read_kernels(tmp_path / "run" / "kernels.h5")
    want = engine_matrix(cfg, x, run_dir=tmp_path / "run")
    for k in ("nngp", "ntk"):
        assert np.array_equal(got[k], want[k]), k


# --------------------------------------------------------------------------- paths

def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    """Run from another working directory: data and run_dir are found beside the config,
    and nothing is written where the command was started; resume works from there too."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    np.save(project / "data" / "x.npy", images(9, seed=14))
    cfg = write_config(project, "c", x1="data/x.npy", compute={"block": 4},
                       run_dir="out/run", keep_tiles=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    compute_ok(os.path.relpath(cfg, elsewhere))
    run = project / "out" / "run"
    assert (run / "kernels.h5").is_file()
    assert list(elsewhere.iterdir()) == []
    want, _ = read_kernels(run / "kernels.h5")
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00002c00000.h5").unlink()
    result = invoke("resume", os.path.relpath(run, elsewhere), "--quiet")
    assert result.exit_code == 0, result.stderr
    got, _ = read_kernels(run / "kernels.h5")
    for k in want:
        assert np.array_equal(got[k], want[k])
    assert list(elsewhere.iterdir()) == []
    status = json.loads(invoke("status", os.path.relpath(run, elsewhere), "--json").stdout)
    assert status["finished"] is True


def test_a_config_its_data_and_its_unfinished_run_moved_together_can_be_continued(tmp_path):
    """docs/cli.md: a config and its data can be moved together and run from anywhere;
    the run directory inside the same folder goes with them."""
    old = tmp_path / "old"
    old.mkdir()
    np.save(old / "x.npy", images(9, seed=16))
    write_config(old, "c", compute={"block": 4}, run_dir="run", keep_tiles=True)
    compute_ok(old / "c.yaml")
    want, _ = read_kernels(old / "run" / "kernels.h5")
    (old / "run" / "kernels.h5").unlink()
    (old / "run" / "tiles" / "r00002c00001.h5").unlink()
    new = tmp_path / "new"
    shutil.copytree(old, new)
    shutil.rmtree(old)
    resumed = invoke("resume", new / "run", "--quiet")
    again = invoke("compute", new / "c.yaml", "--quiet")
    assert (resumed.exit_code, again.exit_code) != (2, 2), (
        f"neither resume nor compute continues a moved run:\n  resume: {resumed.stderr}"
        f"  compute: {again.stderr}")
    got, _ = read_kernels(new / "run" / "kernels.h5")
    for k in want:
        assert np.array_equal(got[k], want[k])


# --------------------------------------------------------------------------- input forms

def test_uint8_nchw_h5_input_with_limit_equals_float_nhwc_npy(tmp_path):
    """The same images as uint8, stored NCHW in an HDF5 group with 3 extra rows cut off by
    data.limit, give bit for bit the kernels of float32 NHWC .npy. Values are used as
    they are (0..255, not rescaled)."""
    x = np.random.default_rng(19).integers(0, 256, size=(9, 6, 6, 2), dtype=np.uint8)
    np.save(tmp_path / "f32.npy", x.astype(np.float32))
    more = np.concatenate([x, np.full((3, 6, 6, 2), 255, np.uint8)])
    with h5py.File(tmp_path / "u8.h5", "w") as f:
        f.create_dataset("group/images", data=more.transpose(0, 3, 1, 2), chunks=(2, 2, 6, 6))
    ref = write_config(tmp_path, "ref", x1="f32.npy", layers=GAP_NET, compute={"block": 4},
                       run_dir="ref")
    var = write_config(tmp_path, "var", x1="u8.h5", key="group/images", layout="NCHW",
                       limit=9, layers=GAP_NET, compute={"block": 4}, run_dir="var")
    compute_ok(ref)
    compute_ok(var)
    want, _ = read_kernels(tmp_path / "ref" / "kernels.h5")
    got, _ = read_kernels(tmp_path / "var" / "kernels.h5")
    for k in want:
        assert got[k].shape == (9, 9) and got[k].dtype == np.float32
        assert np.array_equal(got[k], want[k]), k
    assert np.median(np.diag(got["nngp"])) > 1000  # of order 255**2, not 1


# --------------------------------------------------------------------------- devices

@pytest.mark.slow
def test_one_device_and_all_devices_give_the_same_result(tmp_path):
    """Subprocesses: the CLI exposes one host device per core (2 here). A small engine
    chunk makes pair batches of a few pairs, so every block is spread over all devices."""
    np.save(tmp_path / "x.npy", images(20, seed=20))
    one = write_config(tmp_path, "one", layers=GAP_NET, compute={"block": 8, "devices": 1},
                       run_dir="r1")
    every = write_config(tmp_path, "all", layers=GAP_NET, compute={"block": 8},
                         run_dir="rall")
    env = cli_env(KERNELCLI_CHUNK_BYTES=20_000,  # and a compilation cache the runs share
                  JAX_COMPILATION_CACHE_DIR=tmp_path / "jax_cache",
                  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0,
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0)
    for cfg in (one, every):
        r = run_cli("compute", cfg, "--quiet", env=env)
        assert r.returncode == 0, r.stderr
    got, _ = read_kernels(tmp_path / "r1" / "kernels.h5")
    want, _ = read_kernels(tmp_path / "rall" / "kernels.h5")
    for k in want:
        assert np.array_equal(got[k], want[k])


def test_more_devices_than_exist_is_a_config_error(tmp_path):
    np.save(tmp_path / "x.npy", images(4))
    cfg = write_config(tmp_path, "c", compute={"devices": 4096})
    r = run_cli("compute", cfg, "--quiet")
    assert r.returncode == 2
    assert r.stderr.startswith("Error: compute.devices: 4096 devices requested but only ")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- the seed case

@pytest.mark.slow
def test_the_seed_case_is_plannable(tmp_path):
    """10,000 x 32x32x3 uint8 through conv+relu+global_avg_pool+dense: one untiled call
    would need hundreds of TiB, the plan fits the budget."""
    x = np.lib.format.open_memmap(tmp_path / "cifar.npy", mode="w+", dtype=np.uint8,
                                  shape=(10_000, 32, 32, 3))
    x[:] = np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3)  # cheap, not constant
    x.flush()
    del x
    cfg = write_config(tmp_path, "seed", x1="cifar.npy", layers=GAP_NET)
    r = run_cli("estimate", cfg, "--memory", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["n1"], out["n2"]) == (10_000, 10_000)
    assert out["pairs_total"] == 10_000 * 10_001 // 2
    assert out["untiled_peak_bytes"] >= 380 * TiB
    assert out["peak_bytes_per_device"] <= out["memory_budget_bytes"]
    assert out["output_bytes"] == 10_000 ** 2 * 4 * 2
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()
