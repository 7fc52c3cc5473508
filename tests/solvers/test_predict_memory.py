"""``predict``'s Cholesky and CG routes count everything they allocate before they
start: the factorisation (kernel, factor) or CG's blocks, vectors and held kernel, the
targets, the streamed test kernel and the results of every kind and ridge; a budget too small is refused before any
work (exit 2 in the CLI), naming what to change. In-process, small N."""

from __future__ import annotations

import tracemalloc

import pytest
from test_train_test import write_cfg, write_data

from helpers_cli import FLATTEN_NET, invoke, snapshot
from kernelcli.errors import BudgetError
from kernelcli.run import predict
from kernelcli.solvers import (
    cg_memory_bytes,
    cholesky_memory_bytes,
    hold_fits,
    solve_memory_bytes,
)

pytestmark = pytest.mark.usefixtures("keep_process_state")

N, M, C = 600, 17, 3  # N past one block of the factorisation, as users' kernels are


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predict_memory")
    write_data(folder, n_train=N, n_test=M, seed=3)
    cfg = write_cfg(folder, layers=FLATTEN_NET, block=16)
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    return folder / "run_tt"


def traced_peak(run, **options):
    """``(result, peak bytes)`` of ``predict(run, **options)``: every array and object
    Python allocated, after a first call (its set-up, the products' compilation for
    these shapes, is not the route's); both calls' predictions.h5 removed."""
    predict(run, **options)
    (run / "predictions.h5").unlink()
    tracemalloc.start()
    try:
        out = predict(run, **options)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        (run / "predictions.h5").unlink()


def test_the_count_holds_what_the_route_allocates(run):
    need = cholesky_memory_bytes(N, M, C, ridges=3, kinds=2)
    assert need > solve_memory_bytes(N) == 16 * N * N
    out, peak = traced_peak(run, ridges=(1e-4, 1e-2, 1.0), solver="cholesky",
                            available_bytes=need)
    assert out.solver == "cholesky"
    # every array and object Python allocated (the factor is made in place in one)
    assert peak <= need, (peak, need)


def test_too_small_a_budget_is_refused_before_any_work(run):
    need = cholesky_memory_bytes(N, M, C, ridges=2, kinds=2)
    before = snapshot(run)
    # at this N no route fits below Cholesky's need (CG holds two float64 blocks of K,
    # the whole kernel twice here; the eigendecomposition four copies): the solver is
    # no lever, fewer ridges are
    for solver in ("cholesky", "auto"):
        with pytest.raises(BudgetError) as err:
            predict(run, ridges=(1e-4, 1.0), solver=solver, available_bytes=need - 1)
        msg = str(err.value)
        assert msg.startswith(f"solver= cholesky on {N} training rows needs ")
        assert "for each of 2 ridge(s)" in msg and "give fewer ridges= values" in msg
        assert "use solver=" not in msg
    assert snapshot(run) == before
    # one ridge fits: auto takes it
    assert predict(run, ridges=(0.1,), available_bytes=need - 1).solver == "cholesky"
    (run / "predictions.h5").unlink()



@pytest.mark.parametrize("held", [False, True])
def test_cg_holds_the_kernel_only_where_it_fits_and_its_count_holds(run, held):
    """CG holds the float32 kernel (``4 N^2`` bytes) only where that and its streamed
    need fit, and what it allocates stays within them either way."""
    ridges = (1e-4, 1e-2, 1.0)
    need = cg_memory_bytes(N, M, C, ridges=3, kinds=2)
    budget = need + 4 * N * N if held else need
    assert hold_fits(N, M, C, 3, 2, 5, budget) is held
    assert not hold_fits(N, M, C, 3, 2, 5, 4 * N * N * 4 - 1)  # a quarter at most
    out, peak = traced_peak(run, ridges=ridges, solver="cg", available_bytes=budget)
    assert out.solver == "cg"
    assert peak <= budget, (peak, budget)
