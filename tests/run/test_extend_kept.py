"""``extend`` reads back every tile the grown run keeps before it changes anything: a
kept tile replaced by another run's tile, or damaged, refuses the extend before the
switch (exit 2, one line naming the tile), the old run left as it was, and the same
extend again then grows the run correctly. Real files, the CLI as a user drives it."""

from __future__ import annotations

import shutil

import pytest
from test_extend import computed, files, old_run  # noqa: F401 (files: a fixture)

from helpers_cli import assert_bit_identical, error_line, invoke, read_kernels, snapshot

pytestmark = pytest.mark.usefixtures("keep_process_state")

KEPT = "r00000c00000.h5"  # 20 old rows, block 8: block rows 0 and 1 are kept


@pytest.fixture(scope="module")
def setup(files):
    d = files
    grown = read_kernels(computed(d, "all_a", "all.npz", test="test_a.npz", labels_key="y",
                                  test_labels_key="y", test_diagonal=True) / "kernels.h5")[0]
    return d, old_run(d, "kept"), grown


def copy_of(run, tmp_path):
    out = tmp_path / run.name
    shutil.copytree(run, out, symlinks=True)
    return out


def extend(d, run):
    return invoke("extend", run, "--append", d / "new.npz", "--append-labels-key", "y",
                  "--quiet")


def test_a_kept_tile_of_another_run_refuses_the_extend(setup, tmp_path):
    from kernelcli.store import RunStore
    from kernelcli.store._tiles import write_tile  # a whole tile of another run

    d, old, grown = setup
    run = copy_of(old, tmp_path)
    store = RunStore.open(run)
    block = next(b for b in store.run_manifest.geometry.blocks if f"{b.key}.h5" == KEPT)
    arrays = store.read_tile(block)
    tile = run / "tiles" / KEPT
    original = tile.read_bytes()
    tile.unlink()
    write_tile(run / "tiles", block, arrays, run="f" * 64)  # whole, of another run
    before = snapshot(run)
    result = extend(d, run)
    assert result.exit_code == 2, result.stderr
    assert error_line(result) == (
        f"Error: {tile} is a tile of another run (run identity ffffffffffff...), not of "
        f"this one: run directories cannot share folders, so nothing was moved or "
        f"deleted; move that tile (or the whole tiles/ folder) back to its own run "
        f"directory")
    assert snapshot(run) == before
    assert invoke("verify", run).exit_code == 2  # still the old run, still refused
    tile.write_bytes(original)  # the user moves it back: the extend goes through
    assert extend(d, run).exit_code == 0
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], grown)


def test_a_damaged_kept_tile_is_quarantined_before_the_switch(setup, tmp_path):
    d, old, grown = setup
    run = copy_of(old, tmp_path)
    tile = run / "tiles" / KEPT
    data = bytearray(tile.read_bytes())
    data[-100] ^= 0x10
    tile.write_bytes(bytes(data))
    before = snapshot(run)
    result = extend(d, run)
    assert result.exit_code == 2, result.stderr
    line = error_line(result)
    assert line.startswith("Error: ") and str(tile) in line
    assert line.endswith(
        f"; moved to {run / 'quarantine'}/ before {run} was extended (nothing else "
        f"changed): run the same extend again, it computes that tile")
    after = snapshot(run)
    # the old run as it was (its manifest, its result, every other tile), less that tile
    assert {k: v for k, v in before.items() if k != f"tiles/{KEPT}"} == \
        {k: v for k, v in after.items() if not k.startswith("quarantine/")}
    assert [k.split(".h5")[0] for k in after if k.startswith("quarantine/")] == \
        [f"quarantine/{KEPT[:-3]}"]
    result = invoke("verify", run)  # says what it sees, and what to run
    assert result.exit_code == 1 and "run the same extend command again" in result.stderr
    assert extend(d, run).exit_code == 0
    assert invoke("verify", run).exit_code == 0
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], grown)
