"""Run directories through the CLI: a run belongs to one configuration and its
data. Another configuration's run is refused (then replaced only with
``--overwrite``), a finished run is never recomputed by accident, an unfinished
one continues, and what ``resume`` is pointed at must be that run, unchanged.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from helpers_cli import (
    GAP_NET,
    error_line,
    images,
    invoke,
    read_kernels,
    snapshot,
    tile_names,
    write_config,
)

pytestmark = pytest.mark.usefixtures("keep_process_state")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Data, two configurations ``a`` and ``b`` (same data, other nets) and a finished
    run of ``a`` in ``project/run``, computed once for the module."""
    d = tmp_path_factory.mktemp("project")
    np.save(d / "x.npy", images(6, seed=9))
    a = write_config(d, "a", compute={"block": 4}, run_dir="run", keep_tiles=True)
    b = write_config(d, "b", layers=GAP_NET, compute={"block": 4}, run_dir="run",
                     keep_tiles=True)
    result = invoke("compute", a, "--quiet")
    assert result.exit_code == 0, result.stderr
    return d, a, b


@pytest.fixture
def finished(project, tmp_path):
    """A private copy of the finished run of ``a``: (a.yaml, b.yaml, run dir). Commands
    on it take ``--run-dir`` (the output location is not part of a run's identity)."""
    d, a, b = project
    run = tmp_path / "run"
    shutil.copytree(d / "run", run)
    return a, b, run


@pytest.mark.slow
def test_run_dir_of_a_different_configuration_is_refused_then_overwritten(finished):
    a, b, run = finished
    before = snapshot(run)
    result = invoke("compute", b, "--run-dir", run, "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: {run} holds a run of a different configuration ('a'); continue that one with "
        f"`kernelcli resume {run}`, pick another --run-dir, or replace it with --overwrite")
    assert snapshot(run) == before

    (run / "notes.txt").write_text("mine")
    result = invoke("compute", b, "--run-dir", run, "--overwrite", "--quiet")
    assert result.exit_code == 0, result.stderr
    arrays, attrs = read_kernels(run / "kernels.h5")
    assert attrs["config"] == b.read_text()
    assert sorted(arrays) == ["nngp", "ntk"] and arrays["ntk"].shape == (6, 6)
    assert (run / "notes.txt").read_text() == "mine", "--overwrite removes only its own files"


def test_unfinished_run_of_a_different_configuration_is_refused(finished):
    _a, b, run = finished
    (run / "kernels.h5").unlink()
    before = snapshot(run)
    result = invoke("compute", b, "--run-dir", run, "--quiet")
    assert result.exit_code == 2
    assert "holds a run of a different configuration" in error_line(result)
    assert snapshot(run) == before


def test_compute_on_a_finished_run_does_not_overwrite_it(finished):
    a, _b, run = finished
    result_file = run / "kernels.h5"
    before = snapshot(run)
    stat = result_file.stat()
    result = invoke("compute", a, "--run-dir", run)
    assert result.exit_code == 0
    assert error_line(result) == (f"{result_file} is already complete; use --overwrite to "
                                  f"recompute it")
    assert snapshot(run) == before
    assert result_file.stat().st_mtime_ns == stat.st_mtime_ns
    assert result_file.stat().st_ino == stat.st_ino


def test_compute_overwrite_on_a_finished_run_recomputes_it(finished):
    a, _b, run = finished
    want, _ = read_kernels(run / "kernels.h5")
    old = (run / "kernels.h5").stat()
    result = invoke("compute", a, "--run-dir", run, "--overwrite", "--quiet")
    assert result.exit_code == 0, result.stderr
    new = (run / "kernels.h5").stat()
    # a new file: the file system may hand the freed inode number out again, but the
    # modification time (the copy keeps the original's) is the new write's
    assert (new.st_ino, new.st_mtime_ns) != (old.st_ino, old.st_mtime_ns)
    got, _ = read_kernels(run / "kernels.h5")
    for k in want:
        assert np.array_equal(got[k], want[k])


def test_resume_of_a_finished_run_says_so(finished):
    _a, _b, run = finished
    before = snapshot(run)
    result = invoke("resume", run)
    assert result.exit_code == 0
    assert error_line(result) == f"{run / 'kernels.h5'} is already complete"
    assert snapshot(run) == before


def test_resume_of_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "file.txt").write_text("x")
    before = snapshot(tmp_path)
    for args, message in (
        (["resume", tmp_path / "empty"],
         f"Error: {tmp_path / 'empty'} is not a kernelcli run directory (no manifest.json)"),
        (["resume", tmp_path / "nowhere"],
         f"Error: {tmp_path / 'nowhere'} is not a kernelcli run directory (no such directory)"),
        (["status", tmp_path / "empty"],
         f"Error: {tmp_path / 'empty'} is not a kernelcli run directory (no manifest.json)"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2
        assert error_line(result) == message
    assert snapshot(tmp_path) == before


def test_resume_of_a_foreign_manifest_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text('{"something": "else"}\n')
    result = invoke("resume", run)
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: {run}/manifest.json has no checksum: it was not "
                                  f"written by this version of kernelcli; start the run afresh "
                                  f"with `kernelcli compute CONFIG --overwrite`")


@pytest.mark.slow
def test_resume_after_the_data_changed_or_vanished_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", images(6, seed=10))
    a = write_config(tmp_path, "a", compute={"block": 4}, run_dir="run", keep_tiles=True)
    assert invoke("compute", a, "--quiet").exit_code == 0
    run = tmp_path / "run"
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00001c00000.h5").unlink()
    before = snapshot(run)
    original = np.load(tmp_path / "x.npy")

    (tmp_path / "x.npy").unlink()
    result = invoke("resume", run)
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: data.x1: {tmp_path / 'x.npy'} does not exist; give "
                                  f"the path to a .npy, .npz, .h5, .hdf5 file")
    assert snapshot(run) == before

    changed = original.copy()
    changed[0, 0, 0, 0] += 1.0
    np.save(tmp_path / "x.npy", changed)
    result = invoke("resume", run)
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: data.x1 ({tmp_path / 'x.npy'}) is not the data the run in {run} started with "
        f"(its content fingerprint changed); restore the original file, or start afresh with "
        f"`kernelcli compute CONFIG --run-dir {run} --overwrite` or another --run-dir")
    assert snapshot(run) == before
    # compute with the same configuration refuses too
    result = invoke("compute", a, "--quiet")
    assert result.exit_code == 2
    assert "is not the data the run in" in error_line(result)
    assert snapshot(run) == before

    np.save(tmp_path / "x.npy", original)  # the original data back: the run continues
    result = invoke("resume", run, "--quiet")
    assert result.exit_code == 0, result.stderr
    assert (run / "kernels.h5").is_file()


def test_too_small_budget_on_an_existing_run_leaves_it_alone(finished, tmp_path):
    """compute.memory does not change the result, so the run is found; the plan no longer
    fits, and nothing is touched."""
    a, _b, run = finished
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00001c00001.h5").unlink()
    text = a.read_text().replace("compute:\n  block: 4", "compute:\n  block: 4\n  memory: 1KiB")
    assert "1KiB" in text
    tiny = a.parent / f"tiny_{tmp_path.name}.yaml"
    tiny.write_text(text)
    before = snapshot(run)
    result = invoke("compute", tiny, "--run-dir", run, "--quiet")
    assert result.exit_code == 2
    line = error_line(result)
    assert line.startswith("Error: ") and "compute.memory" in line
    assert snapshot(run) == before


def test_compute_again_continues_an_unfinished_run(finished):
    a, _b, run = finished
    want, _ = read_kernels(run / "kernels.h5")
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00001c00000.h5").unlink()
    kept = run / "tiles" / "r00000c00000.h5"
    ino = kept.stat().st_ino
    result = invoke("compute", a, "--run-dir", run)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {run / 'kernels.h5'}" in result.stderr
    got, _ = read_kernels(run / "kernels.h5")
    for k in want:
        assert np.array_equal(got[k], want[k])
    assert kept.stat().st_ino == ino, "a completed tile must not be recomputed"
    assert tile_names(run) == {"r00000c00000.h5", "r00001c00000.h5", "r00001c00001.h5"}


@pytest.mark.parametrize("command", ["predict", "resume", "status", "assemble", "clean",
                                     "verify", "extend"])
def test_a_file_given_for_run_dir_says_what_the_command_takes(tmp_path, command):
    """The configuration is what one has at hand after compute: a command that takes
    the run directory says so (one message, every such command), exit 2."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: c\n")
    result = invoke(command, cfg)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: {command} takes a run directory (the output.run_dir of a computed "
        f"configuration), not a file: kernelcli {command} RUN_DIR")
    assert cfg.read_text() == "name: c\n"
