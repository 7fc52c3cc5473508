"""CG's products with K spread over row bands (``predict --executor processes|ray``):
bit-identical to the single-process product and solve, a worker killed with SIGKILL
is restarted and its band recomputed (or, when it keeps dying, a one-line error),
never a wrong or hanging solve."""

from __future__ import annotations

import os
import signal

import h5py
import numpy as np
import pytest
from test_ray import ray_cluster, ray_driver  # noqa: F401 - a local Ray cluster, if Ray is here

from helpers_predict import assert_same_as_single_process
from kernelcli.errors import ComputeError, UsageError

# the worker processes behind --executor processes: their restarts and refusals
from kernelcli.run import _predict_spread as _spread
from kernelcli.run._predict_spread import ProcessBands, check_executor, spread
from kernelcli.solvers import BandOperator, BandWorker, H5KernelOperator, band_bounds


def psd(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 12))
    return np.exp(-0.05 * ((x[:, None] - x[None]) ** 2).sum(-1)) + x @ x.T / 12


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("spread") / "kernels.h5"
    k = psd(90)
    with h5py.File(path, "w") as f:
        f.create_dataset("ntk", data=k.astype(np.float32))
        f.create_dataset("nngp", data=k)  # a float64 kernel: the casts go the other way
    return path


@pytest.fixture(scope="module")
def pool(kernel_file):
    """Three worker processes over 90 rows in blocks of 8 (bands of 32, 32, 26 rows)."""
    base = H5KernelOperator(kernel_file, "ntk", block_rows=8)
    bands = ProcessBands(base, workers=3, timeout_s=120)
    yield BandOperator(base, bands, bands.bounds)
    bands.close()


def test_bands_are_whole_blocks_in_order():
    assert band_bounds(90, 8, 3) == [(0, 32), (32, 64), (64, 90)]
    assert band_bounds(90, 8, 100) == [(s, min(s + 8, 90)) for s in range(0, 90, 8)]
    assert band_bounds(5, 8, 4) == [(0, 5)]


@pytest.mark.parametrize("dataset", ["ntk", "nngp"])
@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_band_products_stack_to_the_single_process_product_bit_for_bit(kernel_file, dataset,
                                                                       cache_bytes):
    base = H5KernelOperator(kernel_file, dataset, block_rows=8)
    v = np.random.default_rng(1).standard_normal((90, 7))
    for exact, single in ((True, base.matmul), (False, base.matmul32)):
        parts = [BandWorker(kernel_file, dataset, s, e, 8, cache_bytes).product(
            v.astype(np.float64 if exact else np.float32), exact)
            for s, e in band_bounds(90, 8, 4)]
        assert np.array_equal(np.concatenate(parts), single(v))


def test_processes_give_the_single_process_product_and_cg_solve_bit_for_bit(kernel_file, pool):
    assert_same_as_single_process(pool, H5KernelOperator(kernel_file, "ntk", block_rows=8),
                                  kind="ntk")


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def test_a_killed_worker_is_restarted_and_its_band_recomputed(kernel_file, pool):
    base = H5KernelOperator(kernel_file, "ntk", block_rows=8)
    v = np.random.default_rng(3).standard_normal((90, 4))
    want = base.matmul(v)
    bands = pool.pool
    for round_ in range(10):
        band = round_ % len(bands.bounds)
        bands.deaths[band] = 0  # each round its own budget of restarts
        old = bands.pids()[band]
        if round_ % 2:  # killed while its product is in flight, before it could answer
            os.kill(old, signal.SIGSTOP)  # (v is small: the send does not wait for it)
            bands.iteration += 1
            msg = (bands.iteration, v, True)
            for i in range(len(bands.bounds)):
                bands._send(i, msg)
            _kill(old)
            got = np.concatenate(bands._collect({i: msg for i in range(3)}, bands.iteration))
        else:  # killed between two products
            _kill(old)
            got = pool.matmul(v)
        assert np.array_equal(got, want)
        assert bands.pids()[band] != old and bands.deaths[band] == 1


def test_a_worker_that_keeps_dying_stops_the_solve_with_a_clear_error(kernel_file):
    base = H5KernelOperator(kernel_file, "ntk", block_rows=8)
    v = np.ones((90, 2))
    with spread(base, "processes", workers=2) as op:
        bands = op.pool
        with pytest.raises(ComputeError) as err:
            for _ in range(_spread.MAX_RESTARTS + 1):
                _kill(bands.pids()[1])
                op.matmul(v)
    assert str(err.value) == (
        f"the worker of rows 48 to 90 of 'ntk' ({kernel_file}) died 4 times (last: killed by "
        f"SIGKILL); the CG solve stops, as it cannot go on without that band; predict "
        f"again, or with fewer workers if memory ran out")
    assert all(not p.is_alive() for p in bands.procs)


def test_a_stopped_worker_stops_the_solve_after_the_timeout_instead_of_hanging(kernel_file):
    base = H5KernelOperator(kernel_file, "ntk", block_rows=8)
    bands = ProcessBands(base, workers=2, timeout_s=1)
    try:
        os.kill(bands.pids()[0], signal.SIGSTOP)
        v = np.ones((90, 400))  # 288 kB: more than a pipe holds, so its send waits too
        with pytest.raises(ComputeError) as err:
            BandOperator(base, bands, bands.bounds).matmul(v)
        assert str(err.value) == ("the worker of rows 0 to 48 of 'ntk' gave no answer in "
                                  "1 s; the CG solve stops")
    finally:
        bands.close()
    assert all(not p.is_alive() for p in bands.procs)


@pytest.mark.parametrize("args, message", [
    (("threads", None, None, "cg"),
     "executor=: 'threads' is not accepted; give one of local, processes, ray, shards"),
    (("processes", None, None, "cholesky"),
     "executor= processes: only conjugate gradients' products are spread over workers; "
     "give solver= cg (not cholesky)"),
    (("processes", 0, None, "cg"), "workers=: 0 is not accepted; give an integer from 1 "
                                   "to 1024"),
    (("local", 2, None, "cg"), "workers= needs executor= processes, ray or shards"),
    (("shards", None, None, "cg"), "executor= shards needs workers= N, the number of "
                                   "shards of the job array serving the bands"),
    (("processes", 2, "127.0.0.1:6379", "cg"), "address= needs executor= ray"),
])
def test_bad_executor_settings_are_usage_errors(args, message):
    with pytest.raises(UsageError) as err:
        check_executor(*args)
    assert str(err.value) == message


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    from test_train_test import write_cfg, write_data

    from helpers_cli import FLATTEN_NET, invoke

    folder = tmp_path_factory.mktemp("spread_run")
    write_data(folder, n_train=40, n_test=17, seed=3)
    assert invoke("compute", write_cfg(folder, layers=FLATTEN_NET, block=16),
                  "--quiet").exit_code == 0
    return folder / "run_tt"


def _predictions(run) -> dict:
    out = {}
    with h5py.File(run / "predictions.h5") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[...])
                     if isinstance(obj, h5py.Dataset) else None)
    return out


def test_predict_with_worker_processes_writes_the_same_predictions_bit_for_bit(finished,
                                                                               tmp_path):
    import json
    import shutil

    from helpers_cli import invoke

    got = {}
    for name, extra in (("local", ()), ("processes", ("--executor", "processes",
                                                      "--workers", "2"))):
        run = shutil.copytree(finished, tmp_path / name)
        result = invoke("predict", run, "--solver", "cg", "--ridge", "1e-3,0.1", "--json",
                        *extra)
        assert result.exit_code == 0, result.stderr
        got[name] = (json.loads(result.stdout), _predictions(run))
    (out, files), (want, want_files) = got["processes"], got["local"]
    assert out["results"] == want["results"] and out["selected"] == want["selected"]
    assert out["solver"] == "cg" and files.keys() == want_files.keys() and files
    assert all(np.array_equal(files[k], want_files[k]) for k in files)


def test_executor_with_another_solver_is_refused_naming_the_flags(finished):
    from helpers_cli import invoke

    result = invoke("predict", finished, "--executor", "processes")
    assert result.exit_code == 2
    assert result.stderr == ("Error: --executor processes: only conjugate gradients' "
                             "products are spread over workers; give --solver cg (not "
                             "auto)\n")
    assert not (finished / "predictions.h5").exists()


def test_ray_actors_give_the_same_products_and_survive_a_killed_actor(kernel_file, ray_driver):
    """One actor per band on a real local Ray cluster (tests/run/test_ray.py's), one of them
    SIGKILLed between products: Ray restarts it and the product is the same."""
    address = ray_driver
    psutil = pytest.importorskip("psutil")
    base = H5KernelOperator(kernel_file, "ntk", block_rows=8)
    v = np.random.default_rng(4).standard_normal((90, 3))
    # the test cluster has 2 CPUs: 5 workers asked, 2 bands (an actor asks for a CPU)
    with spread(base, "ray", workers=5, address=address) as op:
        assert op.bounds == [(0, 48), (48, 90)]
        assert np.array_equal(op.matmul(v), base.matmul(v))
        assert np.array_equal(op.matmul32(v), base.matmul32(v))
        actors = [p for p in psutil.process_iter(["cmdline"])
                  if " ".join(p.info["cmdline"] or ()).startswith("ray::BandWorker")]
        assert len(actors) == 2
        actors[1].kill()
        assert np.array_equal(op.matmul(v), base.matmul(v))


def test_workers_on_a_landmark_run_are_refused_naming_the_flags(tmp_path):
    from test_landmarks import _cfg
    from test_train_test import write_data

    from helpers_cli import invoke

    write_data(tmp_path, n_train=20, n_test=5, seed=5)
    assert invoke("compute", _cfg(tmp_path, "m6", 6), "--quiet").exit_code == 0
    run = tmp_path / "run_m6"
    result = invoke("predict", run, "--executor", "processes", "--solver", "cg")
    assert result.exit_code == 2
    assert result.stderr == (f"Error: --executor, --workers, --address: {run} is a landmark "
                             f"run (data.landmarks), solved in this process by Nystrom "
                             f"regression; drop them\n")
    assert not (run / "predictions.h5").exists()
