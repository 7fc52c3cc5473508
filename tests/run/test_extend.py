"""``kernelcli extend``: a finished run grown by more training rows (``--append``) or
another test set (``--test``) is, bit for bit, the run of the grown data set computed
from scratch with the same blocks; only the new entries are computed; mistakes are one
line and exit 2; a kill at any moment is continued by ``resume`` or the same extend.

Small conv nets on 6x6 images; 20 training rows and block 8, so the old run's last
block row is partial and its tiles must be computed again while the others are kept.
Runs of other kinds (preprocessed, with readouts and augmentation, of the accelerator
plan, a rectangle) are grown in test_extend_kinds.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import kernelcli
from helpers_cli import (
    GAP_NET,
    assert_bit_identical,
    error_line,
    images,
    invoke,
    read_kernels,
    snapshot,
    tile_names,
)

N_OLD, N_NEW, N_TEST, BLOCK = 20, 12, 7, 8


def labels(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 3, n)


def write_run_config(folder: Path, name: str, x1: str, *, test=None, labels_key=None,
                     test_labels_key=None, test_diagonal=False, layers=GAP_NET,
                     preprocess=None, keep_tiles=True) -> Path:
    data = {"x1": x1, "key": "x"}
    if labels_key:
        data["labels_key"] = labels_key
    if test:
        data["test"] = test
    if test_labels_key:
        data["test_labels_key"] = test_labels_key
    if preprocess:
        data["preprocess"] = preprocess
    doc = {"name": name, "data": data, "architecture": {"layers": layers},
           "kernel": {"kinds": ["nngp", "ntk"], "test_diagonal": test_diagonal},
           "compute": {"block": BLOCK}, "output": {"run_dir": f"run_{name}"}}
    if keep_tiles is not None:  # these tests count the tiles kept; None: the default
        doc["output"]["keep_tiles"] = keep_tiles
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Old training rows, appended rows, the whole of both, two test sets, with labels."""
    d = tmp_path_factory.mktemp("data")
    x, y = images(N_OLD + N_NEW, seed=1), labels(N_OLD + N_NEW, 1)
    t, ty = images(N_TEST, seed=2), labels(N_TEST, 2)
    u, uy = images(N_TEST + 3, seed=3), labels(N_TEST + 3, 3)
    np.savez(d / "old.npz", x=x[:N_OLD], y=y[:N_OLD])
    np.savez(d / "new.npz", x=x[N_OLD:], y=y[N_OLD:])
    np.savez(d / "all.npz", x=x, y=y)
    np.savez(d / "test_a.npz", x=t, y=ty)
    np.savez(d / "test_b.npz", x=u, y=uy)
    return d


def computed(folder: Path, name: str, x1: str, **kw) -> Path:
    """A finished run of ``x1`` (and the options), its run directory."""
    cfg = write_run_config(folder, name, x1, **kw)
    out = kernelcli.compute(cfg)
    assert out.result is not None
    return folder / f"run_{name}"


@pytest.fixture(scope="module")
def scratch(files):
    """From-scratch runs of the grown data sets (the references)."""
    return {
        "all_a": read_kernels(computed(files, "all_a", "all.npz", test="test_a.npz",
                                       labels_key="y", test_labels_key="y",
                                       test_diagonal=True) / "kernels.h5")[0],
        "old_b": read_kernels(computed(files, "old_b", "old.npz", test="test_b.npz",
                                       labels_key="y", test_labels_key="y",
                                       test_diagonal=True) / "kernels.h5")[0],
        "all_b": read_kernels(computed(files, "all_b", "all.npz", test="test_b.npz",
                                       labels_key="y", test_labels_key="y",
                                       test_diagonal=True) / "kernels.h5")[0],
    }


def _stamp(path: Path) -> tuple:
    """Inode and mtime: a file written again is told apart even where the file system
    reuses the inode number of a file just deleted."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def old_run(files, name: str) -> Path:
    return computed(files, name, "old.npz", test="test_a.npz", labels_key="y",
                    test_labels_key="y", test_diagonal=True)


def test_append_is_bit_identical_to_a_fresh_run_and_computes_only_new_rows(files, scratch):
    run = old_run(files, "append")
    before = {n: _stamp(run / "tiles" / n) for n in tile_names(run)}
    out = kernelcli.extend(run, append=files / "new.npz", append_labels_key="y")
    assert out.result == str(run / "kernels.h5")
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], scratch["all_a"])
    # 20 old rows, block 8: the tiles of block rows 0 and 1 (3 tiles) are kept as they
    # were, and the test tiles of their columns move down (rewritten under their new
    # keys); the partial third row, the new rows and the rest of the test rectangle are
    # computed
    kept = {n for n in tile_names(run) if before.get(n) == _stamp(run / "tiles" / n)}
    assert kept == {"r00000c00000.h5", "r00001c00000.h5", "r00001c00001.h5"}
    assert (out.n1_before, out.n1, out.blocks_reused, out.blocks_total) == (20, 32, 5, 14)
    assert out.pairs_new == out.pairs_total - (36 + 64 + 36) - 2 * N_TEST * BLOCK
    assert not [p for p in (run / "tiles").iterdir() if p.name.startswith("carry-")]
    assert kernelcli.run.verify(run).ok
    report = kernelcli.run.status(run)
    assert report.finished and report.extend.n1_before == 20
    r = kernelcli.open_run(run)
    assert r["ntk"].shape == (32, 32) and r.labels["labels"].shape == (32,)
    assert np.array_equal(r.labels["labels"], labels(32, 1))
    # predict on the grown run
    res = invoke("predict", run, "--ridge", "1e-3", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["n_train"] == 32
    # the same extend again: already complete, nothing appended twice
    again = invoke("extend", run, "--append", files / "new.npz", "--append-labels-key", "y")
    assert again.exit_code == 0 and "is already complete" in again.stderr


def test_test_set_replaced_or_added_is_bit_identical_and_reuses_the_training_tiles(
        files, scratch):
    run = old_run(files, "retest")
    training = {n: _stamp(run / "tiles" / n) for n in tile_names(run) if int(n[1:6]) < 3}
    out = kernelcli.extend(run, test=files / "test_b.npz", test_labels_key="y")
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], scratch["old_b"])
    assert all(_stamp(run / "tiles" / n) == stamp for n, stamp in training.items())
    assert (out.blocks_reused, out.blocks_new, out.n_test) == (6, 6, N_TEST + 3)
    # then more training rows too, in a second extend: as a fresh run of both
    kernelcli.extend(run, append=files / "new.npz", append_labels_key="y")
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], scratch["all_b"])
    assert kernelcli.run.verify(run).ok
    # a run without a test set gets one
    plain = computed(files, "plain", "old.npz", labels_key="y", test_diagonal=True)
    kernelcli.extend(plain, test=files / "test_b.npz", test_labels_key="y")
    assert_bit_identical(read_kernels(plain / "kernels.h5")[0], scratch["old_b"])


def test_dry_run_writes_nothing_and_shows_the_cost(files):
    run = old_run(files, "dry")
    files_before = snapshot(run)
    res = invoke("extend", run, "--append", files / "new.npz", "--append-labels-key", "y",
                 "--dry-run", "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["dry_run"], out["n1_before"], out["n1"], out["blocks_reused"],
            out["blocks_total"]) == (True, 20, 32, 5, 14)
    assert snapshot(run) == files_before
    text = invoke("extend", run, "--test", files / "test_b.npz", "--dry-run")
    assert text.exit_code == 0
    assert text.stderr.splitlines()[1] == ("  tiles: 6 kept, 6 to compute, of 12 (a fresh "
                                           "run computes all 12)")


def test_keys_not_given_are_the_runs_where_the_file_has_them_else_the_only_array(
        files, tmp_path):
    """``--append new.npz`` alone takes the run's keys (x, and its labels y) from the
    file; a file of one array under another name takes that one; the recorded request
    names the keys taken, so the same command is the same extend."""
    run = old_run(files, "keys")
    data = np.load(files / "new.npz")
    np.savez(tmp_path / "renamed.npz", pixels=data["x"])
    np.savez(tmp_path / "renamed_labels.npz", y=data["y"])
    same = invoke("extend", run, "--append", files / "new.npz", "--dry-run", "--json")
    given = invoke("extend", run, "--append", files / "new.npz", "--append-key", "x",
                   "--append-labels-key", "y", "--dry-run", "--json")
    other = invoke("extend", run, "--append", tmp_path / "renamed.npz", "--append-labels",
                   tmp_path / "renamed_labels.npz", "--dry-run", "--json")
    for res in (same, given, other):
        assert res.exit_code == 0, res.stderr
    assert json.loads(same.stdout) == json.loads(given.stdout)
    assert json.loads(other.stdout)["n1"] == json.loads(given.stdout)["n1"]


def test_mistakes_are_one_line_exit_2_and_change_nothing(files, tmp_path):
    run = old_run(files, "mistakes")
    np.savez(tmp_path / "shape.npz", x=images(4, 5, 5, 2), y=labels(4, 0))
    np.savez(tmp_path / "dtype.npz", x=images(4).astype(np.float64), y=labels(4, 0))
    np.savez(tmp_path / "unlabelled.npz", x=images(4))
    np.savez(tmp_path / "two.npz", images=images(4), labels=labels(4, 0))
    files_before = snapshot(run)
    cases = [
        (("--append", tmp_path / "shape.npz", "--append-labels-key", "y"),
         f"Error: --append: examples of {tmp_path / 'shape.npz'} have shape (5, 5, 2), but "
         f"the run's training examples have shape (6, 6, 2); expected the same example "
         f"shape"),
        (("--test", tmp_path / "shape.npz"),
         f"Error: --test: examples of {tmp_path / 'shape.npz'} have shape (5, 5, 2), but the "
         f"run's training examples have shape (6, 6, 2); expected the same example shape"),
        (("--append", tmp_path / "dtype.npz", "--append-labels-key", "y"),
         f"Error: --append: {tmp_path / 'dtype.npz'} holds float64, but the run's training "
         f"data (data.x1) is float32; expected float32 (the grown training set is one "
         f"array)"),
        (("--test", tmp_path / "two.npz"),
         f"Error: --test-key: not given, and {tmp_path / 'two.npz'} holds no array 'x' (the "
         f"run's key) nor one array alone: it holds images, labels; give --test-key NAME"),
        (("--test", files / "test_b.npz", "--test-key", "nope"),
         f"Error: --test-key: 'nope' not found in {files / 'test_b.npz'}; keys present: x, y"),
        (("--append", tmp_path / "unlabelled.npz"),
         f"Error: --append: {run} has training labels (data.labels_key), so the appended "
         f"rows need theirs; expected --append-labels-key NAME (in the appended file) or "
         f"--append-labels FILE"),
        ((), "Error: give --test FILE (a test set), --append FILE (more training rows), or "
             "both"),
        (("--test-key", "x"), "Error: --test-key 'x' is given without --test; expected "
                              "--test FILE as well"),
    ]
    for args, message in cases:
        result = invoke("extend", run, *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert error_line(result) == message
    assert snapshot(run) == files_before


def test_unfinished_and_preprocessed_runs_are_refused(files):
    run = old_run(files, "unfinished")
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00000c00000.h5").unlink()
    result = invoke("extend", run, "--test", files / "test_b.npz")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: {run} is not finished (its kernels.h5 does not exist or does not verify); "
        f"extend grows a finished run: finish it with `kernelcli resume {run}`, then extend")
    pre = computed(files, "pre", "old.npz", preprocess="standardize")
    result = invoke("extend", pre, "--append", files / "new.npz")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: --append: {pre} preprocesses its data (data.preprocess: standardize) with "
        f"statistics fitted on the training set; more training rows would change them and "
        f"so every kernel entry: compute the grown data set afresh with `kernelcli compute`")


def test_an_extend_stopped_after_the_switch_is_unmistakable_and_resumes(files, scratch,
                                                                        monkeypatch):
    """Stopped right after the grown run replaced the old one (the kill test does this
    with real signals): the old kernels.h5 is gone, status says the extend is in
    progress, another extend is refused, and resume finishes it bit for bit."""
    import kernelcli.run._extend as ext  # stopped at one step of its own

    run = old_run(files, "stopped")

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ext, "take_over", stop)  # before the moved test tiles are rewritten
    with pytest.raises(KeyboardInterrupt):
        kernelcli.extend(run, append=files / "new.npz", append_labels_key="y")
    monkeypatch.undo()
    assert not (run / "kernels.h5").exists()
    assert sorted(p.name for p in (run / "tiles").iterdir() if p.name.startswith("carry-")) \
        == ["carry-r00004c00000.h5", "carry-r00004c00001.h5"]
    report = invoke("status", run)
    assert report.exit_code == 0
    assert report.stdout.splitlines()[1] == ("  extend in progress: 20 -> 32 training and "
                                             "7 -> 7 test examples; 5 tiles kept from before")
    result = invoke("extend", run, "--test", files / "test_b.npz")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: {run} is in the middle of another extend; finish it with `kernelcli resume "
        f"{run}` (or the same extend command), then extend again")
    assert not kernelcli.run.verify(run).ok
    out = kernelcli.resume(run)
    assert out.result is not None
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], scratch["all_a"])
    assert not [p for p in (run / "tiles").iterdir() if p.name.startswith("carry-")]


def test_the_same_command_on_a_changed_file_is_another_extend(files, scratch, tmp_path):
    """A request is its files' content too: rewritten, the file is not taken for the one
    the run was extended with ('already complete' would silently skip the new data)."""
    import shutil

    run = computed(files, "changed", "old.npz", labels_key="y", test_diagonal=True)
    t = tmp_path / "t.npz"
    shutil.copy(files / "test_a.npz", t)
    kernelcli.extend(run, test=t, test_labels_key="y")
    assert kernelcli.extend(run, test=t, test_labels_key="y").run.already_finished
    shutil.copy(files / "test_b.npz", t)
    out = kernelcli.extend(run, test=t, test_labels_key="y")
    assert not out.run.already_finished
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], scratch["old_b"])
    # the old test rows are gone, and they shared the per-input pass's first 1024-row
    # slice with the 20 training rows: those tiles could not be shown unchanged
    assert out.blocks_reused == 0


def test_a_run_without_tiles_grows_from_its_kernels_h5_bit_identically(files, scratch):
    """The default (``output.keep_tiles: false``): the old tiles were deleted once the
    result verified; extend writes those the grown run keeps from ``kernels.h5`` and
    computes only the others."""
    run = computed(files, "no_tiles", "old.npz", test="test_a.npz", labels_key="y",
                   test_labels_key="y", test_diagonal=True, keep_tiles=None)
    assert not tile_names(run) and (run / "tiles_removed.json").exists()
    out = kernelcli.extend(run, append=files / "new.npz", append_labels_key="y")
    assert out.result == str(run / "kernels.h5")
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], scratch["all_a"])
    assert (out.n1_before, out.n1, out.blocks_reused, out.blocks_total) == (20, 32, 5, 14)
    assert out.pairs_new == out.pairs_total - (36 + 64 + 36) - 2 * N_TEST * BLOCK
    assert not tile_names(run) and (run / "tiles_removed.json").exists()
    assert kernelcli.run.verify(run).ok and kernelcli.run.status(run).finished
