"""CG's products served by the shards of a job array (``predict --executor shards`` and
``predict RUN_DIR --shard I/N``), through files in ``RUN_DIR/predict-work/``: bit-identical to
the single-process product and predictions, a SIGKILLed shard stops the solve with a
clear error, a malformed or foreign file is refused, and shards whose coordinator is
SIGKILLed end by themselves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest
from test_predict_spread import _predictions, finished, psd  # noqa: F401 - a fixture

from helpers_predict import assert_same_as_single_process
from kernelcli.errors import ComputeError, DataError
from kernelcli.run import serve_shard as serve

# the coordinator's side of a job array, and its checked reads of a shard's files
from kernelcli.run._predict_shards import Coordination, ShardBands, load_array
from kernelcli.solvers import BandOperator, H5KernelOperator

SERVER = ("import sys; from kernelcli.run import serve_shard; "
          "serve_shard(sys.argv[1], (int(sys.argv[2]), int(sys.argv[3])))")


def _server(run_dir, i: int, n: int = 2) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SERVER, str(run_dir), str(i), str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})


@pytest.fixture
def run_dir(tmp_path):
    k = psd(90)
    with h5py.File(tmp_path / "kernels.h5", "w") as f:
        f.create_dataset("ntk", data=k.astype(np.float32))
        f.create_dataset("nngp", data=k)
    return tmp_path


def test_shards_give_the_single_process_products_and_a_killed_shard_a_clear_error(run_dir):
    servers = [_server(run_dir, i) for i in range(2)]
    co = Coordination(run_dir, heartbeat_s=0.1, stale_s=2)
    try:
        for dataset in ("ntk", "nngp"):  # two sessions, as two kinds: the servers stay
            base = H5KernelOperator(run_dir / "kernels.h5", dataset, block_rows=8)
            pool = ShardBands(base, co, 2, timeout_s=120, start_timeout_s=120)
            op = BandOperator(base, pool, pool.bounds)
            assert pool.bounds == [(0, 48), (48, 90)]
            # another token's answer for the next product is never opened
            np.save(run_dir / "predict-work" / f"r-{'0' * 32}-1-0.npy", np.zeros((48, 5)))
            assert_same_as_single_process(op, base, kind="nngp" if dataset == "nngp" else None)
        v = np.ones((90, 5))
        servers[1].send_signal(signal.SIGKILL)
        servers[1].wait()
        with pytest.raises(ComputeError) as err:
            op.matmul(v)
        assert str(err.value).startswith("shard 1/2's heartbeat stood still for ")
        assert str(err.value).endswith(" s (killed or cancelled?); the CG solve stops, as it "
                                       "cannot go on without its band")
    finally:
        co.close(2)
    assert servers[0].wait(30) == 0, servers[0].stderr.read()
    assert not (run_dir / "predict-work").exists()  # every file of the protocol removed
    for proc in servers:
        proc.stdout.close(), proc.stderr.close()


def test_a_malformed_or_oversized_array_is_refused(tmp_path):
    path = tmp_path / "r.npy"
    np.save(path, np.zeros((4, 2), np.float32))
    with pytest.raises(DataError) as err:
        load_array(path, (4, 2), np.float64)
    assert str(err.value) == (f"{path} holds an array of shape (4, 2) (float32), not (4, 2) "
                              f"(float64); it is refused")
    np.save(path, np.zeros((400, 2)))
    with pytest.raises(DataError) as err:
        load_array(path, (4, 2), np.float64)
    assert str(err.value) == (f"{path} holds 6,528 bytes, more than an array of shape (4, 2) "
                              f"(float64); it is refused")
    np.save(path, np.array([{"a": 1}] * 8, dtype=object), allow_pickle=True)
    with pytest.raises(DataError) as err:
        load_array(path, (8,), np.float64)
    assert str(err.value).startswith(f"{path} is not a readable .npy array (")


def test_a_shard_refuses_a_session_kernelcli_did_not_write(run_dir):
    folder = run_dir / "predict-work"
    folder.mkdir()
    (folder / "coordinator").write_text("x 1")
    (folder / "session.json").write_text('{"token": "../../etc"}')
    with pytest.raises(DataError) as err:
        serve(run_dir, (0, 2), start_timeout_s=5)
    assert str(err.value) == (f"{folder / 'session.json'} is not a session kernelcli "
                              f"wrote; this shard stops")


COORDINATOR = """
import sys, time
from kernelcli.solvers import H5KernelOperator
from kernelcli.run._predict_shards import Coordination, ShardBands  # a coordinator alone
co = Coordination(sys.argv[1], heartbeat_s=0.1, stale_s=1.5)
ShardBands(H5KernelOperator(sys.argv[1] + "/kernels.h5", "ntk", block_rows=8), co, 2)
print("serving", flush=True)
time.sleep(600)
"""


def test_shards_end_by_themselves_when_their_coordinator_is_killed(run_dir):
    coordinator = subprocess.Popen([sys.executable, "-c", COORDINATOR, str(run_dir)],
                                   stdout=subprocess.PIPE, text=True)
    servers = [_server(run_dir, i) for i in range(2)]
    try:
        assert coordinator.stdout.readline() == "serving\n"
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        for proc in servers:
            _, stderr = proc.communicate(timeout=60)  # stale after 1.5 s: never 60
            assert proc.returncode == 1
            assert stderr.rstrip().endswith("(killed?); shard "
                                            f"{servers.index(proc)}/2 stops")
    finally:
        for proc in (coordinator, *servers):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        coordinator.stdout.close()


def test_predict_with_job_array_shards_writes_the_same_predictions_bit_for_bit(finished,
                                                                               tmp_path):
    """The CLI as a job array runs it: two `predict RUN --shard I/2` processes and the
    coordinating `predict RUN --executor shards --workers 2`. Each a subprocess, the
    local one too: the CLI chooses OpenBLAS's core before numpy loads (kernelcli.kernels._cpu_level),
    which this test process, with numpy loaded, did not, and the bits follow the core."""
    import json
    import shutil

    from helpers_cli import finish, start_cli

    got = {}
    for name in ("local", "shards"):
        run = shutil.copytree(finished, tmp_path / name)
        extra = ("--executor", "shards", "--workers", "2") if name == "shards" else ()
        servers = [start_cli("predict", run, "--shard", f"{i}/2", log_dir=tmp_path / f"s{i}")
                   for i in range(2)] if extra else []
        code, stdout, stderr = finish(start_cli("predict", run, "--solver", "cg", "--ridge",
                                                "1e-3,0.1", "--json", *extra,
                                                log_dir=tmp_path / name), timeout=120)
        assert code == 0, stderr
        for proc in servers:
            code, _, stderr = finish(proc, timeout=60)
            assert code == 0 and stderr.endswith(" products\n"), stderr
        got[name] = (json.loads(stdout), _predictions(run))
        assert not (run / "predict-work").exists()
    (out, files), (want, want_files) = got["shards"], got["local"]
    assert out["results"] == want["results"] and out["selected"] == want["selected"]
    assert files.keys() == want_files.keys() and files
    assert all(np.array_equal(files[k], want_files[k]) for k in files)


def test_shard_with_the_coordinators_options_is_refused(finished):
    from helpers_cli import invoke

    result = invoke("predict", finished, "--shard", "0/2", "--workers", "2")
    assert result.exit_code == 2
    assert result.stderr == ("Error: --shard serves a band to the predict that coordinates; "
                             "--executor, --workers and --address are that predict's: drop "
                             "them here\n")
