"""``data.preprocess: {kind: random_patches}`` through the real CLI: the patches are
fitted on the training set by the seed, kept in the run directory, part of the run's
identity, never fitted again by ``resume`` (a SIGKILL mid-run then ``resume`` gives the
uninterrupted run's bits) nor by ``extend``; ``estimate`` counts their cost; a bad
setting is one line naming the key and what is accepted, and writes nothing."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
import yaml

from helpers_cli import (
    GAP_NET,
    assert_bit_identical,
    cli_env,
    error_line,
    finish,
    images,
    invoke,
    read_kernels,
    run_cli,
    snapshot,
    start_held,
    tile_names,
    wait_held,
)
from kernelcli.config import load_config
from kernelcli.data import PatchSettings, fit_preprocess, patches_file_bytes
from kernelcli.kernels import build_kernel_fn
from kernelcli.run import kernel_matrix

N_TRAIN, N_TEST, BLOCK = 20, 13, 8
# 6 x 6 x 2 images: 4 x 4 maps of patches of 3 x 3, 2 * 4 channels
PATCHES = {"kind": "random_patches", "count": 4, "size": 3, "seed": 7, "bias": 0.5}
SETTINGS = PatchSettings(count=4, size=3, seed=7, bias=0.5, pool=1, stride=1, split=True)

pytestmark = pytest.mark.usefixtures("keep_process_state")


def write_data(folder):
    x = images(N_TRAIN + 2 * N_TEST, seed=3)
    np.savez(folder / "d.npz", x_train=x[:N_TRAIN], x_test=x[N_TRAIN:N_TRAIN + N_TEST],
             x_other=x[N_TRAIN + N_TEST:])
    return x[:N_TRAIN], x[N_TRAIN:N_TRAIN + N_TEST], x[N_TRAIN + N_TEST:]


def write_cfg(folder, name="rp", preprocess=None, test="x_test", run=None):
    data = {"x1": "d.npz", "key": "x_train", "preprocess": preprocess or PATCHES}
    if test:
        data.update(test="d.npz", test_key=test)
    doc = {"name": name, "data": data, "architecture": {"layers": GAP_NET},
           "kernel": {"kinds": ["nngp", "ntk"], "dtype": "float32"},
           "compute": {"block": BLOCK}, "output": {"run_dir": run or f"run_{name}"}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def rp_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rp")
    data = write_data(folder)
    cfg = write_cfg(folder)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    return folder, cfg, data


def test_the_fit_is_the_seeds_kept_in_the_run_and_the_kernel_reads_its_maps(rp_run):
    folder, cfg, (xtr, xte, _) = rp_run
    run = folder / "run_rp"
    pp = fit_preprocess(xtr.astype(np.float64), "random_patches", zca_reg=0.1,
                        patches=SETTINGS)
    assert [p.name for p in run.glob("preprocess-*.npz")] == [
        f"preprocess-{pp.fingerprint()[:16]}.npz"]
    arrays, attrs = read_kernels(run / "kernels.h5")
    assert json.loads(attrs["data_fingerprints"])["preprocess"] == pp.fingerprint()
    c = load_config(cfg)
    kfn = build_kernel_fn(c.architecture, (4, 4, 8), c.kernel.kinds, c.kernel.dtype)
    want = kernel_matrix(kfn, pp.apply(xte, np.float32), pp.apply(xtr, np.float32))
    np.testing.assert_allclose(arrays["nngp_test"], want["nngp"], rtol=1e-5)
    np.testing.assert_allclose(arrays["ntk_test"], want["ntk"], rtol=1e-5)


def test_the_fit_is_part_of_the_runs_identity_and_never_fitted_again(rp_run, tmp_path):
    folder, _, _ = rp_run
    write_data(tmp_path)
    write_cfg(tmp_path)
    other = write_cfg(tmp_path, "other", preprocess=dict(PATCHES, seed=8), run="run_rp")
    assert invoke("compute", tmp_path / "rp.yaml", "--quiet").exit_code == 0
    run = tmp_path / "run_rp"
    # the same seed: the same bits; another seed: another configuration for the run
    assert_bit_identical(read_kernels(run / "kernels.h5")[0],
                         read_kernels(folder / "run_rp" / "kernels.h5")[0])
    fps = [json.loads((r / "manifest.json").read_text())["data_fingerprints"]["preprocess"]
           for r in (run, folder / "run_rp")]
    assert fps[0] == fps[1]
    result = invoke("compute", other, "--quiet")
    assert result.exit_code == 2 and "holds a run of a different configuration" in \
        error_line(result)
    (run / "kernels.h5").unlink()
    (stored,) = run.glob("preprocess-*.npz")
    stored.write_bytes(b"not an npz")  # a resume that fitted again would not notice
    result = invoke("resume", run, "--quiet")
    assert result.exit_code == 2
    assert stored.name in result.stderr and "Traceback" not in result.stderr


def test_extend_maps_another_test_set_with_the_runs_fit(rp_run, tmp_path):
    folder, _, _ = rp_run
    write_data(tmp_path)
    grown = write_cfg(tmp_path, "grown")
    fresh = write_cfg(tmp_path, "fresh", test="x_other")
    for cfg in (grown, fresh):
        assert invoke("compute", cfg, "--quiet").exit_code == 0
    run = tmp_path / "run_grown"
    fit_before = {k: v for k, v in snapshot(run).items() if k.startswith("preprocess-")}
    result = invoke("extend", run, "--test", tmp_path / "d.npz", "--test-key", "x_other",
                    "--quiet")
    assert result.exit_code == 0, result.stderr
    assert {k: v for k, v in snapshot(run).items() if k.startswith("preprocess-")} == \
        fit_before
    assert_bit_identical(read_kernels(run / "kernels.h5")[0],
                         read_kernels(tmp_path / "run_fresh" / "kernels.h5")[0])


def test_estimate_counts_the_patches(rp_run):
    folder, cfg, _ = rp_run
    est = json.loads(invoke("estimate", cfg, "--json").stdout)
    assert est["patches_output_shape"] == [4, 4, 8] and est["patches_channels"] == 8
    assert est["patches_file_bytes"] == patches_file_bytes((6, 6, 2), SETTINGS)
    (stored,) = (folder / "run_rp").glob("preprocess-*.npz")
    assert stored.stat().st_size <= est["patches_file_bytes"]
    assert est["patches_fit_bytes"] > 8 * 100_000 and est["patches_apply_bytes"] > 0
    text = invoke("estimate", cfg).stdout
    assert "random patches: feature maps   4 x 4 x 8 (8 channels)" in text
    assert "random patches fit on disk" in text


def test_a_zca_run_keeps_the_configuration_fingerprint_it_had_before_random_patches(
        tmp_path):
    """random_patches' keys are null for the other kinds and left out of the hash: a zca
    run made before them is still the same configuration (the value: before them)."""
    from kernelcli.pipeline import config_fingerprint

    write_data(tmp_path)
    cfg = write_cfg(tmp_path, preprocess={"kind": "zca", "zca_reg": 0.1}, test=None)
    assert config_fingerprint(load_config(cfg)) == (
        "42950d2da07b868df21e37ffc6aa06d127918a52471857f6e282750b56231e18")


@pytest.mark.parametrize("preprocess, message", [
    (dict(PATCHES, count=0), "rp.yaml: data.preprocess.count: 0 is not a number of patches; expected "
                             "a positive integer"),
    (dict(PATCHES, count=70000), "rp.yaml: data.preprocess.count: 70000 is too large; expected a "
                                 "positive integer no larger than 65536"),
    (dict(PATCHES, size=7), "data.preprocess.size: 7 is larger than the 6 x 6 images; "
                            "expected a size from 1 to 6"),
    (dict(PATCHES, pool=5), "data.preprocess.pool: 5 is larger than the 4 x 4 feature maps "
                            "that patches of size 3 give; expected a pool from 1 to 4"),
    (dict(PATCHES, stride=0), "rp.yaml: data.preprocess.stride: 0 is not a pooling stride; expected "
                              "a positive integer"),
    (dict(PATCHES, seed=-1), "rp.yaml: data.preprocess.seed: -1 is negative; expected an integer "
                             "from 0 to 9223372036854775807"),
    (dict(PATCHES, bias=-0.5), "rp.yaml: data.preprocess.bias: -0.5 is negative; expected a number "
                               "from 0 to 1000"),
    (dict(PATCHES, zca_reg=0), "rp.yaml: data.preprocess.zca_reg: 0 is not accepted; expected a "
                               "number > 0 (e.g. 0.1)"),
    (dict(PATCHES, split="yes"), "rp.yaml: data.preprocess.split: 'yes' is not a boolean; expected "
                                 "true or false"),
    (dict(PATCHES, per_image=False), "rp.yaml: data.preprocess.per_image: false is only used with "
                                     "kind: zca; random_patches normalises every patch"),
    ({"kind": "zca", "zca_reg": 0.1, "count": 4}, "rp.yaml: data.preprocess.count: 4 is only used "
                                                  "with kind: random_patches; drop it for zca"),
])
def test_a_bad_setting_is_named_and_nothing_is_written(tmp_path, preprocess, message):
    write_data(tmp_path)
    cfg = write_cfg(tmp_path, preprocess=preprocess)
    before = snapshot(tmp_path)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2, result.stderr
    assert error_line(result) == f"Error: {message}"
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_gives_the_uninterrupted_bits(rp_run, tmp_path):
    folder, _, _ = rp_run
    reference, _ = read_kernels(folder / "run_rp" / "kernels.h5")
    write_data(tmp_path)
    cfg = write_cfg(tmp_path)
    run = tmp_path / "run_rp"
    env = cli_env()
    proc = start_held("compute", cfg, "--quiet", after=2, log_dir=tmp_path / "logs", env=env)
    wait_held(proc)  # the patches fitted and stored, two tiles published: killed mid-run
    proc.send_signal(signal.SIGKILL)
    rc, _, err = finish(proc)
    assert rc == -signal.SIGKILL and "Traceback" not in err
    assert len(tile_names(run)) == 2 and not (run / "kernels.h5").exists()
    (stored,) = run.glob("preprocess-*.npz")
    fit = stored.read_bytes()
    r = run_cli("resume", run, "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    assert stored.read_bytes() == fit
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], reference)


def test_a_bias_that_zeroes_every_feature_is_refused_before_computing(tmp_path):
    """A threshold no patch can reach makes every feature 0 for every image: every pair
    would get the same kernel value and ``predict`` one label for all. The fit proves it
    (the largest response a normalised patch can give these filters) and refuses."""
    x_train, _, _ = write_data(tmp_path)
    fit = fit_preprocess(x_train, "random_patches", zca_reg=0.1, patches=SETTINGS)
    g = fit.whitening @ fit.filters.T  # responses are p . g_k - mean . g_k, |p| <= 1
    largest = float(np.max(np.sqrt((g * g).sum(axis=0)) + np.abs(fit.mean @ g)))
    for bias in (1000, largest):
        cfg = write_cfg(tmp_path, preprocess=dict(PATCHES, bias=bias, zca_reg=0.1))
        before = snapshot(tmp_path)
        result = invoke("compute", cfg, "--quiet")
        assert result.exit_code == 2, result.stderr
        assert error_line(result) == (
            f"Error: data.preprocess.bias: {float(bias)!r} leaves every random_patches feature "
            f"at 0 for every image (no patch responds to these filters above {largest:.4g}), "
            f"so every pair would have the same kernel; expected a bias below {largest:.4g}")
        assert snapshot(tmp_path) == before
    cfg = write_cfg(tmp_path, preprocess=dict(PATCHES, bias=0.9 * largest, zca_reg=0.1))
    assert invoke("compute", cfg, "--quiet").exit_code == 0
