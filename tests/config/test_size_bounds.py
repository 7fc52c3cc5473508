"""A file of a run directory is read with the size bound its plan implies: a tile by
its block's shape and kinds, ``kernels.h5`` by the matrix, ``test_diag.h5`` by the
test rows. A regular (sparse) file of
100 GB under either name is refused at once, exit 2 (``verify``: 1, as for any
problem it finds), one line naming the file, its size and the bound; never read."""

from __future__ import annotations

import os
import shutil

import pytest
from test_train_test import write_cfg, write_data

from helpers_cli import FLATTEN_NET, error_line, invoke
from kernelcli.store import RunStore
from kernelcli.store._manifest_schema import bytes_bound  # the bound a tile must keep

pytestmark = pytest.mark.usefixtures("keep_process_state")

HUGE = 100 << 30


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounds")
    write_data(folder, n_train=24, n_test=7, seed=5)
    cfg = write_cfg(folder, layers=FLATTEN_NET, block=16, keep_tiles=True)
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    return folder / "run_tt"


@pytest.fixture
def run(finished, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def sparse(path):
    os.truncate(path, HUGE)  # a regular file of 100 GB that holds no block on disk


def test_the_bounds_hold_every_real_file_of_the_run(finished):
    store = RunStore.open(finished)
    kinds = store.run_manifest.kinds
    for b in store.run_manifest.geometry.blocks:
        tile = finished / "tiles" / f"{b.key}.h5"
        assert tile.stat().st_size <= bytes_bound(b.r1 - b.r0, b.c1 - b.c0, len(kinds))
    assert (finished / "kernels.h5").stat().st_size <= store.run_manifest.result_bytes()
    assert store.result().max_bytes == store.run_manifest.result_bytes()
    assert store.result().problem(store.run_id) is None


def test_a_100gb_tile_is_refused_unread(run):
    tile = run / "tiles" / "r00000c00000.h5"
    sparse(tile)
    before = {p.name: p.stat().st_size for p in (run / "tiles").iterdir()}
    bound = bytes_bound(16, 16, 2)
    result = invoke("verify", run)
    assert result.exit_code == 2, result.stderr
    assert error_line(result) == (
        f"Error: {tile} is {HUGE} bytes, more than a kernelcli file of its kind can be "
        f"({bound} bytes)")
    # never moved to quarantine: it is not a tile at all
    assert {p.name: p.stat().st_size for p in (run / "tiles").iterdir()} == before
    assert not (run / "quarantine").exists()


def test_a_100gb_kernels_h5_is_refused_unread(run):
    result_path = run / "kernels.h5"
    sparse(result_path)
    bound = RunStore.open(run).run_manifest.result_bytes()
    said = (f"{result_path} does not verify: it is {HUGE} bytes, more than a kernelcli "
            f"file of its kind can be ({bound} bytes)")
    result = invoke("predict", run, "--ridge", "0.1")
    assert result.exit_code == 2, result.stderr
    assert error_line(result) == (f"Error: {said}; `kernelcli resume {run}` rebuilds it, "
                                  f"then predict")
    assert not (run / "predictions.h5").exists()
    result = invoke("verify", run)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"Error: {said}"


def test_a_100gb_test_diagonal_is_refused_unread(run):
    diag = run / "test_diag.h5"
    sparse(diag)
    bound = bytes_bound(1, 7, 2)
    result = invoke("verify", run)
    assert result.exit_code == 2, result.stderr
    assert error_line(result) == (f"Error: {diag} is {HUGE} bytes, more than a kernelcli "
                                  f"file of its kind can be ({bound} bytes)")
    assert diag.stat().st_size == HUGE
