"""``kernelcli.run.predict(..., stop=)``: a :class:`kernelcli.run.Stop` ends a solve at
its next pass over the kernel (CG, Falkon's bands), ridge (Cholesky) or band (Nystrom),
raising ``Interrupted`` before ``predictions.h5`` is written; the run stays as it was
and the next predict runs. A stop never requested changes nothing."""

from __future__ import annotations

import signal

import h5py
import numpy as np
import pytest
from test_ownership import hold_lock
from test_predict_overlap import StopAt  # requested at its at-th question, from any thread
from test_train_test import write_cfg, write_data

from helpers_cli import error_line, invoke, snapshot
from kernelcli.errors import Interrupted
from kernelcli.run import Stop, compute, predict

pytestmark = pytest.mark.usefixtures("keep_process_state")

DENSE = ["flatten", {"dense": {"W_std": 1.5, "b_std": 0.1}}, "relu",
         {"dense": {"W_std": 1.0, "b_std": 0.0}}]
RIDGES = [1e-3, 1e-1]
NOTHING_WRITTEN = "interrupted (SIGTERM) before anything was written"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A full run and a landmark run (12 of 40 training rows), not yet predicted."""
    folder = tmp_path_factory.mktemp("predict_stop")
    write_data(folder, n_train=40, n_test=13, seed=5)
    out = {}
    for name, landmarks in (("full", None), ("m12", 12)):
        compute(write_cfg(folder, name=name, layers=DENSE, block=16,
                          data={"landmarks": landmarks},
                          kernel={"dtype": "float64", "test_diagonal": landmarks is None}))
        out[name] = folder / f"run_{name}"
    return out


def _interrupted(run, stop, **kwargs) -> None:
    with pytest.raises(Interrupted) as err:
        predict(run, ridges=RIDGES, stop=stop, **kwargs)
    assert str(err.value) == NOTHING_WRITTEN
    assert err.value.exit_code == 128 + signal.SIGTERM
    assert not (run / "predictions.h5").exists()


def _means(run) -> dict:
    with h5py.File(run / "predictions.h5") as f:
        return {k: f[k]["mean"][...] for k in ("nngp", "ntk")}


def _requested() -> Stop:
    """A stop already requested (SIGTERM), as the CLI's is after a signal."""
    stop = Stop()
    stop.request(signal.SIGTERM)
    return stop


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_a_stop_requested_before_the_solve_ends_it_with_nothing_written(runs, solver):
    _interrupted(runs["full"], _requested(), solver=solver)


def test_a_stop_mid_cg_ends_at_the_next_pass_and_the_next_predict_runs(runs):
    run = runs["full"]
    stop = StopAt(3)  # CG's third pass over K: dozens are needed
    _interrupted(run, stop, solver="cg")
    assert stop.asked == 3  # one lane (the kernel is one block), asked once per pass
    # nothing was left locked or half-written, and a stop never requested changes nothing
    predict(run, ridges=RIDGES, solver="cg")
    plain = _means(run)
    predict(run, ridges=RIDGES, solver="cg", stop=Stop())
    for kind, mean in _means(run).items():
        np.testing.assert_array_equal(mean, plain[kind])


@pytest.mark.parametrize("solver", ["cholesky", "cg"], ids=["nystrom", "falkon"])
def test_a_stop_ends_a_landmark_solve_with_nothing_written(runs, solver):
    _interrupted(runs["m12"], _requested(), solver=solver)


def test_a_landmark_predict_is_refused_while_another_process_holds_the_run(runs):
    """One writer per run directory, on the landmark route as on the full kernel's."""
    run = runs["m12"]
    holder = hold_lock(run)
    try:
        before = snapshot(run)
        result = invoke("predict", run, "--ridge", "0.1")
        assert result.exit_code == 2, result.stderr
        assert error_line(result) == (
            f"Error: {run} is in use by another kernelcli process (it holds "
            f"{run / '.kernelcli.lock'}); wait for it to end, then run this again")
        assert snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()
    assert invoke("predict", run, "--ridge", "0.1").exit_code == 0
