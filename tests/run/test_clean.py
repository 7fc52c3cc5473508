"""Tiles after assembly: ``output.keep_tiles: false`` and ``kernelcli clean`` delete the
tiles only once ``kernels.h5`` verifies, and every other command knows a run whose tiles
were removed (status finished, resume nothing to do, assemble and verify re-check the
result). Real runs through the CLI; damage is real bytes changed on disk."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from helpers_cli import (
    assert_bit_identical,
    error_line,
    images,
    invoke,
    read_kernels,
    snapshot,
    tile_names,
    write_config,
)

pytestmark = pytest.mark.usefixtures("keep_process_state")
N, BLOCK = 10, 4  # 6 tiles of a symmetric run


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Data, the configuration ``keep`` (``output.keep_tiles: true``) and a finished run
    of it, and ``drop`` (the same run with the default, ``output.keep_tiles: false``)."""
    d = tmp_path_factory.mktemp("clean")
    np.save(d / "x.npy", images(N, seed=11))
    keep = write_config(d, "keep", compute={"block": BLOCK}, run_dir="ref",
                        keep_tiles=True)
    drop = write_config(d, "drop", compute={"block": BLOCK}, run_dir="ref")
    assert invoke("compute", keep, "--quiet").exit_code == 0
    return d, keep, drop, read_kernels(d / "ref" / "kernels.h5")[0]


@pytest.fixture
def run(project, tmp_path):
    """A private copy of the finished run (every tile kept)."""
    shutil.copytree(project[0] / "ref", tmp_path / "run")
    return tmp_path / "run"


def damage(path):
    with h5py.File(path, "r+") as f:
        f["ntk"][2, 3] = 0.5  # no longer its checksum (nor symmetric)


def test_keep_tiles_true_keeps_the_tiles(run):
    assert len(tile_names(run)) == 6
    assert not (run / "tiles_removed.json").exists()


def test_by_default_the_tiles_are_deleted_once_the_result_verifies(project, tmp_path):
    d, _keep, drop, want = project
    result = invoke("compute", drop, "--run-dir", tmp_path / "run", "--json")
    assert result.exit_code == 0, result.stderr
    run = tmp_path / "run"
    out = json.loads(result.stdout)
    assert out["result"] == str(run / "kernels.h5") and out["tiles_removed"] == 6
    assert "removed its 6 tiles (output.keep_tiles: false)" in result.stderr
    assert tile_names(run) == set() and not (run / "tiles").exists()
    assert json.loads((run / "tiles_removed.json").read_text())["tiles"] == 6
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], want)
    assert invoke("verify", run).exit_code == 0


def test_clean_deletes_only_tiles_and_keeps_a_verified_result(run, project):
    (run / "tiles" / "notes.txt").write_text("mine")
    before = {k: v for k, v in snapshot(run).items() if not k.startswith("tiles/r")}
    result = invoke("clean", run)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert error_line_or(result).startswith("removed 6 tiles (")
    assert error_line_or(result).endswith(f"from {run}; {run / 'kernels.h5'} verified and kept")
    assert tile_names(run) == set()
    assert (run / "tiles" / "notes.txt").read_text() == "mine", "only tile files go"
    after = snapshot(run)
    assert set(after) == set(before) | {"tiles_removed.json"}
    assert all(after[k] == v for k, v in before.items())
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], project[3])
    again = invoke("clean", run, "--json")
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {"run_dir": str(run), "result": str(run / "kernels.h5"),
                                        "tiles_removed": 0, "bytes_removed": 0}


def test_clean_leaves_a_file_under_a_tiles_name_that_it_cannot_prove_its_own(run):
    """A user's file (here a 100 GB sparse one) or a damaged tile under a tile's name
    carries no readable run identity: clean leaves it where it is."""
    names = sorted(tile_names(run))
    big = run / "tiles" / names[0]
    big.unlink()
    with open(big, "wb") as f:
        f.truncate(100 * 10**9)
    damaged = run / "tiles" / names[1]
    damaged.write_bytes(damaged.read_bytes()[:100])
    kept = damaged.read_bytes()
    result = invoke("clean", run, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["tiles_removed"] == 4
    assert tile_names(run) == set(names[:2])
    assert big.stat().st_size == 100 * 10**9
    assert damaged.read_bytes() == kept


def error_line_or(result) -> str:
    """The one line a command printed on stderr."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_clean_refuses_an_unfinished_run_and_deletes_nothing(run):
    (run / "kernels.h5").unlink()
    before = snapshot(run)
    result = invoke("clean", run)
    assert result.exit_code == 1
    assert error_line(result) == (
        f"Error: cannot clean {run}: {run / 'kernels.h5'} does not exist (the run is not "
        f"finished); nothing was deleted. Finish it with `kernelcli resume {run}` (or "
        f"`kernelcli assemble {run}`), then clean")
    assert snapshot(run) == before


def test_clean_refuses_a_result_that_does_not_verify_and_deletes_nothing(run):
    damage(run / "kernels.h5")
    before = snapshot(run)
    result = invoke("clean", run)
    assert result.exit_code == 1
    assert error_line(result) == (
        f"Error: cannot clean {run}: {run / 'kernels.h5'} does not verify (dataset 'ntk' "
        f"does not match its checksum (damaged)); nothing was deleted. `kernelcli resume "
        f"{run}` assembles it again from the tiles")
    assert snapshot(run) == before


def test_clean_of_a_folder_that_is_not_a_run(tmp_path):
    result = invoke("clean", tmp_path)
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: {tmp_path} is not a kernelcli run directory (no "
                                  f"manifest.json)")


def test_a_cleaned_run_is_finished_for_status_resume_assemble_and_verify(run):
    assert invoke("clean", run, "--quiet").exit_code == 0
    before = snapshot(run)
    status = json.loads(invoke("status", run, "--json").stdout)
    assert status["finished"] is True and status["tiles_removed"] is True
    assert (status["blocks_done"], status["pairs_done"]) == (6, N * (N + 1) // 2)
    assert status["result"] == str(run / "kernels.h5")
    text = invoke("status", run)
    assert text.stdout.splitlines()[0] == (
        f"keep: finished, 100.0% of pairs ({N * (N + 1) // 2}/{N * (N + 1) // 2}), blocks "
        f"6/6 (tiles removed after assembly)")
    resume = invoke("resume", run)
    assert resume.exit_code == 0
    assert error_line(resume) == f"{run / 'kernels.h5'} is already complete"
    assemble = invoke("assemble", run, "--json")
    assert assemble.exit_code == 0
    assert assemble.stderr.strip() == f"{run / 'kernels.h5'} is already complete (verified)"
    assert json.loads(assemble.stdout) == {"result": str(run / "kernels.h5"),
                                           "already_finished": True}
    verify = invoke("verify", run)
    assert verify.exit_code == 0
    assert verify.stdout.strip() == (
        f"{run}: verified: manifest and kernels.h5, every byte against its checksums (its "
        f"tiles were removed after assembly: a damaged kernels.h5 would be computed again "
        f"by resume, not rebuilt from them)")
    assert json.loads(invoke("verify", run, "--json").stdout)["tiles_removed"] is True
    assert snapshot(run) == before, "none of them writes"


def test_a_cleaned_run_whose_result_is_damaged_is_computed_again(run, project):
    assert invoke("clean", run, "--quiet").exit_code == 0
    damage(run / "kernels.h5")
    status = json.loads(invoke("status", run, "--json").stdout)
    assert status["finished"] is False
    assert status["result_problem"].endswith(
        f"its tiles were removed after assembly, so `kernelcli resume {run}` computes them "
        f"again")
    verify = invoke("verify", run)
    assert verify.exit_code == 1
    assert ("Error: its tiles were removed after assembly (kernelcli clean or "
            "output.keep_tiles: false): resume computes them again") in verify.stderr
    result = invoke("assemble", run)
    assert result.exit_code == 1
    assert error_line(result) == (
        f"Error: cannot assemble {run / 'kernels.h5'}: it did not verify (it was moved to "
        f"quarantine/) and the tiles were removed after the run was assembled (`kernelcli "
        f"clean` or output.keep_tiles: false); compute them again with `kernelcli resume "
        f"{run}`")
    assert not (run / "kernels.h5").exists()
    result = invoke("assemble", run)  # the result gone, as after a user deleted it
    assert result.exit_code == 1
    assert "it does not exist and the tiles were removed" in error_line(result)
    result = invoke("resume", run, "--quiet")
    assert result.exit_code == 0, result.stderr
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], project[3])
    assert len(tile_names(run)) == 6, "keep_tiles: true (the run's configuration) keeps them"
    assert not (run / "tiles_removed.json").exists()
    assert json.loads(invoke("status", run, "--json").stdout)["tiles_removed"] is False


def test_compute_overwrite_removes_the_record_of_removed_tiles(run, project):
    assert invoke("clean", run, "--quiet").exit_code == 0
    result = invoke("compute", project[1], "--run-dir", run, "--overwrite", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert not (run / "tiles_removed.json").exists()
    assert len(tile_names(run)) == 6


@pytest.mark.parametrize("value, shown", [('"yes"', "'yes'"), ("1", "1"), ("[]", "[]")])
def test_keep_tiles_must_be_a_boolean(project, tmp_path, value, shown):
    text = project[1].read_text().replace("keep_tiles: true", f"keep_tiles: {value}")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    result = invoke("compute", cfg, "--run-dir", tmp_path / "run", "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: bad.yaml: output.keep_tiles: {shown} is not a "
                                  f"boolean; expected true or false")
    assert not (tmp_path / "run").exists()


def test_keep_tiles_null_means_the_default(project, tmp_path):
    from kernelcli.config import load_config

    text = project[1].read_text().replace("keep_tiles: true", "keep_tiles: null")
    cfg = tmp_path / "null.yaml"
    cfg.write_text(text)
    assert load_config(cfg).output.keep_tiles is False
    assert load_config(project[1]).output.keep_tiles is True
    assert "keep_tiles" not in project[2].read_text()
    assert load_config(project[2]).output.keep_tiles is False
