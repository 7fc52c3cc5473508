"""``predict`` is one of the writers of a run directory: it holds the run's lock from
its first read of ``kernels.h5`` to the rename of ``predictions.h5``, so an
``extend``, ``clean`` or ``resume`` cannot change the kernels under it, and it cannot
write beside one of them. Two real processes each way; exact messages."""

from __future__ import annotations

import pytest
from test_ownership import hold_lock
from test_train_test import write_cfg, write_data

from helpers_cli import FLATTEN_NET, error_line, invoke, run_cli, snapshot
from kernelcli.run import predict

pytestmark = pytest.mark.usefixtures("keep_process_state")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predict_lock")
    write_data(folder, n_train=24, n_test=7, seed=5)
    cfg = write_cfg(folder, layers=FLATTEN_NET, block=16, keep_tiles=True)
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    return folder / "run_tt"


def busy(run) -> str:
    return (f"Error: {run} is in use by another kernelcli process (it holds "
            f"{run / '.kernelcli.lock'}); wait for it to end, then run this again")


def test_predict_is_refused_while_another_process_writes_the_run(run):
    for attempt in range(10):  # a lock test is trusted only once it always holds
        holder = hold_lock(run)
        try:
            before = snapshot(run)
            result = invoke("predict", run, "--ridge", "0.1")
            assert result.exit_code == 2, result.stderr
            assert error_line(result) == busy(run)
            assert snapshot(run) == before  # no predictions.h5, nothing else changed
        finally:
            holder.kill()
            holder.wait()
    assert invoke("predict", run, "--ridge", "0.1").exit_code == 0
    assert (run / "predictions.h5").is_file()


def test_a_writer_is_refused_while_predict_runs(run):
    """``clean`` started (as a user would, in another shell) while ``predict`` is
    solving: it must be refused and delete nothing."""
    seen = []

    def clean_meanwhile(line):
        if "CG done" in line and not seen:  # predict is past its reads, before its write
            before = snapshot(run)
            seen.append((run_cli("clean", run, timeout=120), before, snapshot(run)))

    out = predict(run, ridges=(0.1,), kinds=("nngp",), solver="cg",
                  progress=clean_meanwhile)
    assert out.predictions == str(run / "predictions.h5")
    (proc, before, after), = seen
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == busy(run)
    assert after == before
    assert (run / "tiles").is_dir()
