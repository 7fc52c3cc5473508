"""``kernelcli extend`` on runs of other kinds: a preprocessed run takes another test
set (preprocessed with the training set's fit), a run with readouts and augmentation
and a run of the accelerator engine grow bit-identical to their fresh runs, a network
whose per-input numbers change with the rows per call has those rows computed again,
and a rectangle run is refused.

The plain runs grown by more rows or another test set, and the data files these tests
share with them (``files``, cheap to write), are in test_extend.py.
"""

from __future__ import annotations

import numpy as np
import yaml
from test_extend import BLOCK, computed, files  # noqa: F401 (files: a fixture)

import kernelcli
from helpers_cli import GAP_NET, assert_bit_identical, error_line, images, invoke, read_kernels


def test_rows_whose_per_input_numbers_change_are_computed_again(tmp_path):
    """This network's per-input pass gives other last bits for a row when a call holds
    more rows (100 -> 140 here): reusing the old tiles would be silently wrong, so the
    rows concerned are computed again, and the result is still the fresh run's."""
    from helpers_cli import FLATTEN_NET, write_config

    x = images(140, seed=4)
    np.save(tmp_path / "old.npy", x[:100])
    np.save(tmp_path / "new.npy", x[100:])
    np.save(tmp_path / "all.npy", x)
    runs = {}
    for name in ("old", "all"):
        cfg = write_config(tmp_path, name, x1=f"{name}.npy", layers=FLATTEN_NET,
                           compute={"block": 32}, run_dir=f"run_{name}")
        assert kernelcli.compute(cfg).result is not None
        runs[name] = read_kernels(tmp_path / f"run_{name}" / "kernels.h5")[0]
    naive = all(np.array_equal(runs["old"][k], runs["all"][k][:100, :100])
                for k in ("nngp", "ntk"))
    out = kernelcli.extend(tmp_path / "run_old", append=tmp_path / "new.npy")
    assert_bit_identical(read_kernels(tmp_path / "run_old" / "kernels.h5")[0], runs["all"])
    if not naive:  # (as on the CPUs this was written on) not every old tile can stay
        assert out.blocks_reused < 6


def test_a_preprocessed_run_takes_another_test_set(files, tmp_path):
    """The test set is preprocessed with the fit of the training set, as a fresh run's."""
    pre = computed(files, "pre_a", "old.npz", test="test_a.npz", preprocess="standardize")
    fresh = computed(files, "pre_b", "old.npz", test="test_b.npz", preprocess="standardize")
    kernelcli.extend(pre, test=files / "test_b.npz")
    assert_bit_identical(read_kernels(pre / "kernels.h5")[0],
                         read_kernels(fresh / "kernels.h5")[0])


def test_a_rectangle_run_is_refused(tmp_path):
    from helpers_cli import write_config

    np.save(tmp_path / "a.npy", images(6, seed=7))
    np.save(tmp_path / "b.npy", images(4, seed=8))
    cfg = write_config(tmp_path, "rect", x1="a.npy", x2="b.npy", layers=GAP_NET)
    assert kernelcli.compute(cfg).result is not None
    run = tmp_path / "run"
    result = invoke("extend", run, "--append", tmp_path / "b.npy")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: {run} holds the rectangle K(x1, x2) of data.x2; extend grows a run of one "
        f"training set (no data.x2): compute the new rectangle as a run of its own")


def test_a_run_with_readouts_and_augment_grows_bit_identical(files, tmp_path):
    """The three issue-16 features together: a flip-averaged run with two readouts,
    grown by --append, is the fresh run of the grown data set, every readout."""
    arch = {"layers": GAP_NET[:2] + [GAP_NET[0], "relu"],
            "readouts": {"head": ["global_avg_pool", "dense"], "after": [2, 4]}}

    def run(name, x1):
        doc = {"name": name, "data": {"x1": str(files / x1), "key": "x"},
               "architecture": arch, "kernel": {"augment": "hflip"},
               "compute": {"block": BLOCK}, "output": {"run_dir": f"run_{name}"}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        assert kernelcli.compute(tmp_path / f"{name}.yaml").result is not None
        return tmp_path / f"run_{name}"

    grown = run("grown", "old.npz")
    kernelcli.extend(grown, append=files / "new.npz")
    fresh = read_kernels(run("fresh", "all.npz") / "kernels.h5")[0]
    got = read_kernels(grown / "kernels.h5")[0]
    assert sorted(got) == ["nngp_d2", "nngp_d4", "ntk_d2", "ntk_d4"]
    for name, k in fresh.items():
        assert np.array_equal(got[name], k), name


def test_a_run_of_the_accelerator_engine_grows_with_it_bit_identical(files, tmp_path):
    """extend keeps what a run started with, the engine included: the two engines
    agree to rounding, not bit for bit, so new rows computed with the cpu engine beside
    old ones of the accelerator engine would match no fresh run."""

    def run(name, x1):
        doc = {"name": name, "data": {"x1": str(files / x1), "key": "x"},
               "architecture": {"layers": GAP_NET},
               "compute": {"block": BLOCK, "engine": "accelerator"},
               "output": {"run_dir": f"run_{name}"}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        assert kernelcli.compute(tmp_path / f"{name}.yaml").result is not None
        return tmp_path / f"run_{name}"

    grown = run("grown", "old.npz")
    kernelcli.extend(grown, append=files / "new.npz")
    assert_bit_identical(read_kernels(grown / "kernels.h5")[0],
                         read_kernels(run("fresh", "all.npz") / "kernels.h5")[0])
