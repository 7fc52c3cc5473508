"""The command-line contract (docs/cli.md), its results, through click's CliRunner in
this process: what ``compute`` writes (kernels, dtype, symmetry, recorded config,
version and data fingerprint, progress), what ``status`` says of a finished or
unfinished run, and what ``estimate`` reports, as JSON and as text.

Two finished runs (``square_run``, ``rect_run``) are computed once for this module.
The help and the user mistakes are in test_cli.py.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import kernelcli
from helpers_cli import GAP_NET, error_line, images, invoke, read_kernels, write_config

pytestmark = pytest.mark.usefixtures("keep_process_state")


# --------------------------------------------------------------------------- results

N = 11          # with block 4: ragged blocks, 6 tiles
N1, N2 = 7, 5


@pytest.fixture(scope="module")
def square_run(tmp_path_factory):
    """A finished symmetric float32 run (flatten net, 6x6x2, block 4)."""
    d = tmp_path_factory.mktemp("square")
    np.save(d / "x.npy", images(N, seed=1))
    cfg = write_config(d, "square", compute={"block": 4}, run_dir="run", keep_tiles=True)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    return cfg, d / "run"


@pytest.fixture(scope="module")
def rect_run(tmp_path_factory):
    """A finished rectangular float64 run (GAP net, x2 given), nngp only."""
    d = tmp_path_factory.mktemp("rect")
    np.save(d / "x1.npy", images(N1, seed=2, dtype=np.float64))
    np.save(d / "x2.npy", images(N2, seed=3, dtype=np.float64))
    cfg = write_config(d, "rect", x1="x1.npy", x2="x2.npy", layers=GAP_NET, kinds=["nngp"],
                       dtype="float64", compute={"block": 4}, run_dir="run")
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    return cfg, d / "run"


def test_compute_writes_square_exactly_symmetric_kernels_in_the_configured_dtype(square_run):
    _cfg, run = square_run
    arrays, _attrs = read_kernels(run / "kernels.h5")
    assert sorted(arrays) == ["nngp", "ntk"]
    for k, a in arrays.items():
        assert a.shape == (N, N), k
        assert a.dtype == np.float32, k
        assert np.array_equal(a, a.T), k
        assert np.all(np.isfinite(a)), k
        assert np.all(np.diag(a) > 0), k


def test_compute_records_config_version_and_data_fingerprint(square_run, rect_run):
    fingerprints = []
    for cfg, run in (square_run, rect_run):
        _arrays, attrs = read_kernels(run / "kernels.h5")
        assert attrs["config"] == cfg.read_text()
        assert attrs["kernelcli_version"] == kernelcli.__version__
        assert isinstance(attrs["data_fingerprint"], str) and attrs["data_fingerprint"]
        fingerprints.append(attrs["data_fingerprint"])
    assert fingerprints[0] != fingerprints[1]


def test_compute_reports_progress_on_stderr_into_the_run_dir_option(tmp_path):
    np.save(tmp_path / "x.npy", images(5))
    cfg = write_config(tmp_path, "p", compute={"block": 4}, run_dir="configured")
    result = invoke("compute", cfg, "--run-dir", tmp_path / "elsewhere")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert f"wrote {tmp_path / 'elsewhere' / 'kernels.h5'}" in result.stderr
    assert "100.0%" in result.stderr
    assert (tmp_path / "elsewhere" / "kernels.h5").is_file()
    assert not (tmp_path / "configured").exists()


def test_x2_gives_a_rectangle_of_the_requested_kinds_only(rect_run):
    _cfg, run = rect_run
    arrays, _attrs = read_kernels(run / "kernels.h5")
    assert list(arrays) == ["nngp"]
    assert arrays["nngp"].shape == (N1, N2)
    assert arrays["nngp"].dtype == np.float64
    assert np.all(np.isfinite(arrays["nngp"]))


def test_status_json_of_a_finished_run(square_run):
    _cfg, run = square_run
    result = invoke("status", run, "--json")
    assert result.exit_code == 0
    assert len(result.stdout.strip().splitlines()) == 1
    out = json.loads(result.stdout)
    assert isinstance(out, dict)
    blocks = 3 * 4 // 2
    assert out["pairs_total"] == N * (N + 1) // 2
    assert out["pairs_done"] == out["pairs_total"]
    assert out["blocks_total"] == blocks
    assert out["blocks_done"] == blocks
    assert out["finished"] is True


def test_status_json_of_an_unfinished_run(square_run, tmp_path):
    _cfg, run = square_run
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / "kernels.h5").unlink()
    (copy / "tiles" / "r00002c00001.h5").unlink()  # rows 8..10 x cols 4..7: 12 pairs
    out = json.loads(invoke("status", copy, "--json").stdout)
    assert out["finished"] is False
    assert out["blocks_done"] == out["blocks_total"] - 1
    assert out["pairs_done"] == out["pairs_total"] - 3 * 4
    text = invoke("status", copy)
    assert text.exit_code == 0
    assert "not finished" in text.stdout


def test_status_text_of_a_finished_run(square_run):
    _cfg, run = square_run
    result = invoke("status", run)
    assert result.exit_code == 0
    assert "finished, 100.0% of pairs" in result.stdout
    assert str(run / "kernels.h5") in result.stdout


ESTIMATE_KEYS = {"n1", "n2", "pairs_total", "pair_batch", "blocks_total",
                 "peak_bytes_per_device", "memory_budget_bytes", "untiled_peak_bytes",
                 "output_bytes"}


def test_estimate_memory_json_reports_the_plan(tmp_path):
    np.save(tmp_path / "x.npy", images(N))
    cfg = write_config(tmp_path, "e", compute={"block": 4}, run_dir="run")
    result = invoke("estimate", cfg, "--memory", "--json")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) == 1
    out = json.loads(result.stdout)
    assert ESTIMATE_KEYS <= set(out)
    assert "seconds_estimate" not in out
    for key in ESTIMATE_KEYS:
        assert isinstance(out[key], int) and not isinstance(out[key], bool), key
    assert (out["n1"], out["n2"]) == (N, N)
    assert out["pairs_total"] == N * (N + 1) // 2
    assert out["blocks_total"] == 6
    assert out["output_bytes"] == N * N * 4 * 2
    assert 0 < out["peak_bytes_per_device"] <= out["memory_budget_bytes"]
    assert out["pair_batch"] >= 1
    assert not (tmp_path / "run").exists(), "estimate must not write a run"


def test_estimate_rectangular_with_time(tmp_path):
    np.save(tmp_path / "x1.npy", images(N1, seed=4))
    np.save(tmp_path / "x2.npy", images(N2, seed=5))
    cfg = write_config(tmp_path, "e", x1="x1.npy", x2="x2.npy", layers=GAP_NET,
                       compute={"block": 4}, run_dir="run")
    result = invoke("estimate", cfg, "--memory", "--time", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert ESTIMATE_KEYS | {"seconds_estimate"} <= set(out)
    assert (out["n1"], out["n2"]) == (N1, N2)
    assert out["pairs_total"] == N1 * N2
    assert out["blocks_total"] == 2 * 2
    assert isinstance(out["seconds_estimate"], float) and out["seconds_estimate"] > 0
    assert not (tmp_path / "run").exists()


def test_estimate_text(tmp_path):
    np.save(tmp_path / "x.npy", images(N))
    cfg = write_config(tmp_path, "e", compute={"block": 4})
    result = invoke("estimate", cfg, "--memory")
    assert result.exit_code == 0
    for label in ("pair evaluations", "peak memory per device", "memory budget per device",
                  "one untiled call would need"):
        assert label in result.stdout


@pytest.mark.slow
def test_smallest_budget_reported_is_the_smallest_that_works(tmp_path):
    np.save(tmp_path / "x.npy", images(N))
    small = write_config(tmp_path, "small", compute={"block": 4, "memory": "1KiB"})
    err = error_line(result := invoke("estimate", small, "--memory", "--json"))
    assert result.exit_code == 2
    assert "the smallest budget that works is" in err
    smallest = int(err.rsplit("(", 1)[1].split()[0])
    ok = write_config(tmp_path, "ok", compute={"block": 4, "memory": smallest})
    result = invoke("estimate", ok, "--memory", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["peak_bytes_per_device"] <= smallest == out["memory_budget_bytes"]
    one_less = write_config(tmp_path, "less", compute={"block": 4, "memory": smallest - 1})
    assert invoke("estimate", one_less, "--memory").exit_code == 2
