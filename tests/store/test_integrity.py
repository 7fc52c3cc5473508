"""Never a silently wrong kernel: real damaged, foreign and edited files, real full file
systems, driven through the CLI. Each case asserts the exit status, one message line,
no traceback, and that what is finally published equals an uninterrupted run's bits."""

from __future__ import annotations

import json
import shutil
import subprocess

import h5py
import numpy as np
import pytest

from helpers_cli import (
    KERNELCLI,
    assert_bit_identical,
    edit_manifest,
    error_line,
    images,
    invoke,
    manifest_of_format_2,
    read_kernels,
    run_cli,
    small_filesystem,
    write_config,
)

# the seal over a file's bytes, damaged by hand
from kernelcli.store._sealed import SealError, seal, unseal

pytestmark = pytest.mark.usefixtures("keep_process_state")
N, BLOCK = 24, 8  # 6 tiles of a symmetric run


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Data, configurations ``a`` and ``other`` (another b_std) and the reference result
    of an uninterrupted run of ``a``."""
    d = tmp_path_factory.mktemp("integrity")
    np.save(d / "x.npy", images(N, seed=3))
    a = write_config(d, "a", compute={"block": BLOCK}, run_dir="ref", keep_tiles=True)
    layers = [{"conv": {"filter": [3, 3], "padding": "SAME", "W_std": 1.5, "b_std": 0.3}},
              "relu", "flatten", {"dense": {"W_std": 1.0, "b_std": 0.3}}]
    other = write_config(d, "other", layers=layers, compute={"block": BLOCK}, run_dir="ref2",
                         keep_tiles=True)
    assert invoke("compute", a, "--quiet").exit_code == 0
    assert invoke("compute", other, "--quiet").exit_code == 0
    return d, a, other, read_kernels(d / "ref" / "kernels.h5")[0]


@pytest.fixture
def run(project, tmp_path):
    """A private copy of the finished reference run of ``a``."""
    d = project[0]
    shutil.copytree(d / "ref", tmp_path / "run")
    return tmp_path / "run"


def flip_bit(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def assert_matches_reference(run, project):
    assert invoke("verify", run).exit_code == 0
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], project[3])


def test_every_single_bit_flip_of_a_sealed_file_is_detected():
    data = seal({"nngp": np.arange(12.0).reshape(3, 4)}, {"key": "r00000c00000", "run": "x"})
    assert unseal(data)[0]["nngp"].sum() == 66
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= 1 << (offset % 8)
        if offset >= len(data.split(b"\0", 1)[0]) and offset < 512:
            continue  # NUL padding of the header: not part of what is checked
        with pytest.raises(SealError):
            unseal(bytes(damaged))
    with pytest.raises(SealError, match="truncated"):
        unseal(data[:-1])


def test_a_flipped_bit_in_a_tile_is_named_quarantined_and_recomputed(run, project):
    (run / "kernels.h5").unlink()
    tile = run / "tiles" / "r00001c00000.h5"
    flip_bit(tile, tile.stat().st_size - 200)
    result = invoke("assemble", run)
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: tile {tile} is damaged: its checksum does not match its content; moved to "
        f"{run / 'quarantine'}/: `kernelcli resume {run}` computes it again")
    assert not (run / "kernels.h5").exists() and not tile.exists()
    assert [p.name.split(".h5")[0] for p in (run / "quarantine").iterdir()] == ["r00001c00000"]
    assert invoke("resume", run, "--quiet").exit_code == 0
    assert_matches_reference(run, project)


def test_resume_repairs_damaged_tiles_it_finds_at_assembly(run, project):
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00000c00000.h5").unlink()  # one tile to compute
    flip_bit(run / "tiles" / "r00002c00001.h5", 600)
    result = invoke("resume", run, "--quiet")
    assert result.exit_code == 0
    assert "Warning: tile" in result.stderr and "computed again" in result.stderr
    assert_matches_reference(run, project)


def test_a_tile_of_another_run_is_refused_before_anything_moves(run, project):
    # a whole tile of another run means the folder is shared with (or copied from)
    # another run directory: refused (exit 2), nothing moved, until the user sorts it out
    d = project[0]
    (run / "kernels.h5").unlink()
    tile = run / "tiles" / "r00002c00000.h5"
    shutil.copy(d / "ref2" / "tiles" / "r00002c00000.h5", tile)
    for command in ("verify", "resume"):
        result = invoke(command, run)
        assert result.exit_code == 2, result.stderr
        assert f"{tile} is a tile of another run" in result.stderr
        assert tile.read_bytes() == (d / "ref2" / "tiles" / "r00002c00000.h5").read_bytes()
        assert not (run / "quarantine").exists()
    tile.unlink()
    assert invoke("resume", run, "--quiet").exit_code == 0
    assert_matches_reference(run, project)


def test_a_tile_moved_to_another_block_is_refused(run, project):
    (run / "kernels.h5").unlink()
    shutil.copy(run / "tiles" / "r00002c00000.h5", run / "tiles" / "r00002c00001.h5")
    result = invoke("assemble", run)
    assert result.exit_code == 2 and "belongs to another plan" in error_line(result)
    assert invoke("resume", run, "--quiet").exit_code == 0
    assert_matches_reference(run, project)


def test_a_result_of_another_run_or_damaged_is_never_reported_finished(run, project):
    d = project[0]
    shutil.copy(d / "ref2" / "kernels.h5", run / "kernels.h5")
    status = invoke("status", run, "--json")
    assert status.exit_code == 0 and not json.loads(status.stdout)["finished"]
    verify = invoke("verify", run)
    assert verify.exit_code == 1
    assert "belongs to another run" in verify.stderr
    assert verify.stderr.strip().endswith(f"then run: kernelcli resume {run}")
    assert invoke("resume", run, "--quiet").exit_code == 0  # rebuilt from the tiles
    assert_matches_reference(run, project)
    with h5py.File(run / "kernels.h5", "r+") as f:
        f["ntk"][2, 5] = 0.5
    assert invoke("verify", run).exit_code == 1
    assert not json.loads(invoke("status", run, "--json").stdout)["finished"]
    assert invoke("compute", project[1], "--run-dir", run, "--quiet").exit_code == 0
    assert_matches_reference(run, project)


@pytest.mark.parametrize("command", ["resume", "assemble", "status", "verify", "predict",
                                     "clean"])
def test_an_edited_manifest_is_refused_by_every_command(run, command):
    (run / "kernels.h5").unlink()
    edit_manifest(run, lambda m: m.update(config_text=m["config_text"].replace("1.0", "1.1")))
    result = invoke(command, run)
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: {run}/manifest.json does not match its checksum: it was edited or damaged "
        f"after the run started; restore it, or start afresh with `kernelcli compute CONFIG "
        f"--overwrite`")


def test_an_edited_manifest_with_a_fresh_checksum_is_still_refused(run):
    edit_manifest(run, lambda m: m.update(config_text=m["config_text"].replace("1.0", "1.1")),
                  rechecksum=True)
    for command in ("resume", "assemble", "verify", "clean"):
        result = invoke(command, run)
        assert result.exit_code == 2
        assert "does not have the fingerprint it was recorded with" in error_line(result)


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(b"\xff\xfe{"), "is not UTF-8 text (byte 0)"),
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "is not valid JSON"),
    (lambda p: p.write_text("[1, 2]"), "does not hold a JSON object"),
    (lambda p: p.write_text("[" * 100000), "is not valid JSON"),
])
@pytest.mark.parametrize("command", ["resume", "status", "assemble", "predict", "verify"])
def test_a_damaged_manifest_is_one_line_exit_2(run, damage, message, command):
    damage(run / "manifest.json")
    result = invoke(command, run)
    assert result.exit_code == 2 and message in error_line(result)


@pytest.mark.parametrize("change, message", [
    (lambda m: m["plan"].pop("n1"), "plan.n1 is missing; expected an integer"),
    (lambda m: m["plan"].update(block=0), "plan.block is 0; expected an integer"),
    (lambda m: m["plan"].update(kinds=["rbf"]), "plan.kinds is [\"rbf\"]"),
    (lambda m: m["plan"].update(pairs_total=5), "plan.pairs_total is 5 but its plan has"),
    # format 2's engine keys in plan (runs from before the engine section)
    (lambda m: manifest_of_format_2(m)["plan"].update(native="2"),
     'plan.native is "2"; expected an integer 2..'),
    (lambda m: manifest_of_format_2(m)["plan"].update(native=1),
     "plan.native is 1; expected an integer 2.."),
    (lambda m: manifest_of_format_2(m)["plan"].update(native_library="../../lib"),
     'plan.native_library is "../../lib"; expected 16 hexadecimal digits'),
    (lambda m: manifest_of_format_2(m)["plan"].update(native_library=7),
     "plan.native_library is 7; expected 16"),
    (lambda m: manifest_of_format_2(m)["plan"].update(engine="gpu"),
     'plan.engine is "gpu"; expected one of cpu, native, accelerator'),
    (lambda m: manifest_of_format_2(m).update(engine={"name": "cpu"}),
     "in a manifest of format 2, which records it in plan"),
    # the engine section
    (lambda m: m.pop("engine"), "engine is missing; expected a mapping"),
    (lambda m: m["engine"].update(name="gpu"),
     'engine.name is "gpu"; expected one of cpu, native, accelerator'),
    (lambda m: m["engine"].update(native_revision="2"),
     'engine.native_revision is "2"; expected an integer 1..'),
    (lambda m: m["engine"].update(native_library=7), "engine.native_library is 7; expected 16"),
    (lambda m: m["engine"].update(name="cpu", native_revision=3),
     'engine.name is "cpu", which does not go with what else it records'),
    (lambda m: m["engine"].update(chunk=8), "engine.chunk is not a key of engine"),
    (lambda m: m["plan"].update(engine="cpu"), "plan.engine is a key of format 2"),
    (lambda m: m.update(format=1), "is of format 1, not 3"),
])
def test_a_consistent_but_incomplete_manifest_is_refused(run, change, message):
    edit_manifest(run, change, rechecksum=True)
    for command in ("resume", "status", "assemble", "verify"):
        result = invoke(command, run)
        assert result.exit_code == 2 and message in error_line(result), command


def test_more_shards_than_blocks_are_refused_before_anything_is_written(project, tmp_path):
    a = project[1]
    result = invoke("compute", a, "--run-dir", tmp_path / "r", "--shard", "0/7", "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == (
        "Error: --shard: 0/7 asks for 7 processes but the run has 6 blocks; expected at "
        "most 6 (a smaller compute.block gives more blocks)")
    assert not (tmp_path / "r").exists()
    result = invoke("compute", a, "--shard", "0/99999999999999999999")
    assert result.exit_code == 2 and "is not of the form I/N" in result.stderr


def test_a_really_full_disk_publishes_nothing_wrong_and_resume_finishes(project, tmp_path):
    a = project[1]
    with small_filesystem(tmp_path / "fs", "size=48k") as fs:
        run = fs / "run"
        first = run_cli("compute", a, "--run-dir", run, "--quiet")
        assert first.returncode == 1, first.stderr
        line = first.stderr.strip()
        assert line.startswith("Error: disk full while writing ") and "\n" not in line
        assert f"more in {run} (tiles " in line and f"`kernelcli resume {run}`" in line
        assert not (run / "kernels.h5").exists()
        assert not [p for p in run.rglob("*.tmp")]
        assert invoke("verify", run).exit_code == 1  # unfinished, but every tile sound
        subprocess.run(["mount", "-o", "remount,size=4m", str(fs)], check=True)
        assert invoke("resume", run, "--quiet").exit_code == 0
        assert_matches_reference(run, project)


def test_assembly_that_hits_a_file_size_limit_publishes_nothing(run, project):
    (run / "kernels.h5").unlink()
    # A kernel-enforced limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so writes fail with
    # EFBIG): the free-space check passes and h5py fails mid-write.
    limited = subprocess.run(["bash", "-c", 'ulimit -f 8; exec "$0" assemble "$1"', KERNELCLI,
                              str(run)], capture_output=True, text=True, timeout=120)
    assert limited.returncode == 1, limited.stderr
    assert limited.stderr.strip() == (f"Error: disk full while writing {run}/kernels.h5: free "
                                      f"some space, then resume")
    assert not (run / "kernels.h5").exists() and not list(run.glob(".*.tmp"))
    assert invoke("assemble", run).exit_code == 0
    assert_matches_reference(run, project)


def test_a_damaged_test_diagonal_is_never_assembled(tmp_path):
    from kernelcli.store import RunStore

    store = RunStore(tmp_path / "run").create({"name": "t"})
    store.test_diag.write({"nngp": np.ones(3)})
    path = tmp_path / "run" / "test_diag.h5"
    flip_bit(path, path.stat().st_size - 50)
    with pytest.raises(Exception, match="test_diag.h5 is damaged") as info:
        store.test_diag.read(("nngp",))
    assert info.value.exit_code == 2 and not path.exists()
    assert (tmp_path / "run" / "quarantine").is_dir()


def test_a_tile_with_non_finite_or_non_positive_values_is_never_published():
    from kernelcli.errors import ComputeError

    # the check of a tile's values before it is written (no public call reaches a bad tile)
    from kernelcli.pipeline._tile_checks import check_tile
    from kernelcli.plan import Block

    diag = Block(1, 1, 8, 16, 8, 16, diagonal=True)
    good = np.eye(8) + 0.1
    check_tile(diag, {"nngp": good})
    bad = good.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ComputeError, match=r"1 nngp values are not finite \(first K\[10, 11\]"):
        check_tile(diag, {"nngp": bad})
    zero = good.copy()
    zero[4, 4] = 0.0
    with pytest.raises(ComputeError, match=r"self-kernels are not positive \(first K\[12, 12\]"):
        check_tile(diag, {"ntk": zero})
    check_tile(Block(1, 0, 8, 16, 0, 8), {"nngp": -good})  # off the diagonal: any sign
