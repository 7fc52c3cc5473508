"""Tile packs: a run directory of many tiles holds few files, with
the crash-safety rules of single tiles.

Real runs on tiny data (8x8 images, 4-row blocks, so a few hundred tiles), packs of a
few dozen tiles (``KERNELCLI_PACK_TILES``). A run with packing off (``0``) is exactly a
run directory of earlier versions (one file per tile): it must still resume and
verify. The states a kill leaves between a pack's publication and the deletion of
its tiles are made exactly (the pack written, the tiles still there), and real
SIGKILLs at random moments are the slow test.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers_cli import (
    GAP2_NET,
    assert_bit_identical,
    cli_env,
    finish,
    images,
    invoke,
    read_kernels,
    start_cli,
    wait_until,
    write_config,
)
from kernelcli.plan import assign
from kernelcli.run import compute, extend, resume, status, verify
from kernelcli.store import RunStore

# the pack format itself: its index, its name pattern, a pack written by hand
from kernelcli.store._packs import PACK, TileSet, read_index, write_pack

PACK_TILES_VAR = "KERNELCLI_PACK_TILES"  # the documented variable, as a user sets it
N, BLOCK, PACK_TILES = 48, 4, 24   # 12 block rows: 78 tiles, 3 packs of 24 and 6 loose
TILES = (N // BLOCK) * (N // BLOCK + 1) // 2


def make(folder: Path, n: int = N) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "x.npy", images(n, 8, 8, 2, seed=7))
    return write_config(folder, "packs", layers=GAP2_NET, compute={"block": BLOCK},
                        keep_tiles=True, run_dir="run")


def files_in(run: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(run))


@pytest.fixture(scope="module")
def loose_run(tmp_path_factory):
    """A finished run made with packing off: the layout of earlier versions."""
    folder = tmp_path_factory.mktemp("loose")
    cfg = make(folder)
    mp = pytest.MonkeyPatch()
    mp.setenv(PACK_TILES_VAR, "0")
    try:
        compute(cfg)
    finally:
        mp.undo()
    return folder / "run", read_kernels(folder / "run" / "kernels.h5")[0]


def copy_run(loose_run, dest: Path) -> Path:
    run, _ = loose_run
    shutil.copytree(run.parent, dest)
    return dest / "run"


def test_packing_bounds_the_file_count_and_changes_no_bit(tmp_path, monkeypatch, loose_run):
    monkeypatch.setenv(PACK_TILES_VAR, str(PACK_TILES))
    cfg = make(tmp_path)
    compute(cfg)
    run = tmp_path / "run"
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], loose_run[1])
    packs = sorted(n for n in os.listdir(run / "tiles") if PACK.match(n))
    assert len(packs) == TILES // PACK_TILES
    loose = TILES - len(packs) * PACK_TILES
    assert files_in(run) == 3 + len(packs) + loose  # manifest.json, kernels.h5, .kernelcli.lock
    assert files_in(loose_run[0]) == 3 + TILES
    report = status(run)
    assert (report.files, report.tile_packs, report.tiles_loose) == (
        3 + len(packs) + loose, len(packs), loose)
    assert report.blocks_done == TILES and report.finished
    assert verify(run).ok
    text = invoke("status", run).stdout
    assert (f"files: {3 + len(packs) + loose} in the run directory; tiles: {len(packs)} packs "
            f"and {loose} files of their own") in text
    # what `kernelcli estimate` plans is what the packer left
    from dataclasses import replace

    from kernelcli.config import load_config

    # the files planned for this run's own geometry (estimate() would plan it afresh)
    from kernelcli.run._estimate import planned_files
    from kernelcli.store import RunStore, planned_tile_files

    geometry = RunStore.open(run).run_manifest.geometry
    sizes = [(b.r1 - b.r0) * (b.c1 - b.c0) * geometry.itemsize * len(geometry.kinds) + 4096
             for b in geometry.blocks]
    assert planned_tile_files(sizes, PACK_TILES) == (loose, len(packs))
    config = load_config(cfg)
    planned = planned_files(config, geometry)  # the default KERNELCLI_PACK_TILES: all loose
    assert (planned.tiles, planned.packs, planned.total) == (TILES, 0, files_in(loose_run[0]))
    gone = planned_files(replace(config, output=replace(config.output, keep_tiles=False)),
                         geometry)
    assert (gone.tiles, gone.packs, gone.other) == (0, 0, 4)  # and tiles_removed.json


def test_an_old_run_directory_and_a_kill_between_pack_and_deletions_resume(
        tmp_path, monkeypatch, loose_run):
    """A loose-tile run (earlier versions), some tiles lost, and half its tiles in a pack
    whose loose copies were not deleted yet (a kill right after the pack's rename):
    resume packs what is loose, deletes the duplicates, computes what is missing,
    bit for bit."""
    run = copy_run(loose_run, tmp_path / "job")
    (run / "kernels.h5").unlink()
    tiles = run / "tiles"
    names = sorted(n for n in os.listdir(tiles) if n.endswith(".h5"))
    for name in names[-5:]:
        (tiles / name).unlink()
    store = RunStore.open(run)
    half = names[:40]
    write_pack(tiles, store.run_id, [(n[:-3], (tiles / n).read_bytes()) for n in half])
    assert verify(run).tiles_present == TILES - 5  # duplicates count once
    monkeypatch.setenv(PACK_TILES_VAR, str(PACK_TILES))
    resume(run)
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], loose_run[1])
    left = set(os.listdir(tiles))
    assert not left & set(half), "the loose copies of packed tiles are deleted"
    assert len([n for n in left if PACK.match(n)]) == 1 + (TILES - 40) // PACK_TILES
    assert verify(run).ok


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["tile", "index"])
def test_verify_names_a_damaged_pack_and_resume_recomputes_only_what_it_lost(
        tmp_path, monkeypatch, loose_run, where):
    monkeypatch.setenv(PACK_TILES_VAR, str(PACK_TILES))
    run = copy_run(loose_run, tmp_path / "job")
    (run / "kernels.h5").unlink()
    resume(run)  # packs the old run's tiles, assembles again
    tiles = run / "tiles"
    pack = tiles / sorted(n for n in os.listdir(tiles) if PACK.match(n))[1]
    index = read_index(pack)
    key = sorted(index.entries)[3]
    offset, nbytes, _ = index.entries[key]
    _flip(pack, offset + nbytes // 2 if where == "tile" else 600)
    report = verify(run)
    assert not report.ok
    if where == "tile":
        assert report.tiles_damaged == [key]
        assert (f"tile {key} in pack {pack} is damaged: its bytes do not match their "
                f"checksum in the pack's index") in report.problems
    else:
        assert f"tile pack {pack} is damaged: its index does not match its checksum" \
            in report.problems
        assert report.tiles_present == TILES - PACK_TILES
    (run / "kernels.h5").unlink()
    resume(run)
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], loose_run[1])
    quarantined = os.listdir(run / "quarantine")
    assert len(quarantined) == 1 and quarantined[0].startswith(pack.name + ".")
    assert verify(run).ok
    if where == "tile":  # the pack's other tiles were unpacked, not computed again
        assert len(TileSet(tiles).keys()) == TILES


def test_the_shards_of_a_job_array_write_disjoint_packs(tmp_path, monkeypatch, loose_run):
    monkeypatch.setenv(PACK_TILES_VAR, "8")
    cfg = make(tmp_path)
    for index in (0, 1):
        compute(cfg, shard=(index, 2))
    run = tmp_path / "run"
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], loose_run[1])
    store = RunStore.open(run)
    shares = [{b.key for b in part} for part in assign(store.run_manifest.geometry.blocks, 2)]
    packs = store.tiles.packs()
    assert len(packs) == sum(len(share) // 8 for share in shares)
    for pack in packs:
        keys = set(pack.entries)
        assert keys <= shares[0] or keys <= shares[1], pack.path.name
    assert verify(run).ok


def test_clean_removes_packs_and_loose_tiles(tmp_path, monkeypatch):
    monkeypatch.setenv(PACK_TILES_VAR, str(PACK_TILES))
    cfg = make(tmp_path, n=32)
    compute(cfg)
    run = tmp_path / "run"
    assert any(PACK.match(n) for n in os.listdir(run / "tiles"))
    out = invoke("clean", run)
    assert out.exit_code == 0, out.stderr
    assert f"removed {(32 // BLOCK) * (32 // BLOCK + 1) // 2} tiles (" in out.stderr
    assert not (run / "tiles").exists()
    assert verify(run).ok


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_at_random_moments_with_packing_then_resume_is_bit_identical(
        tmp_path, loose_run, seed):
    """The CLI killed (SIGKILL) at random moments while it computes, packs and deletes;
    each resume goes on; the end is the uninterrupted run's kernels, bit for bit, and
    no tile is lost (the count of completed tiles never goes down)."""
    rng = random.Random(seed)
    cfg = make(tmp_path)
    run = tmp_path / "run"
    env = cli_env(**{PACK_TILES_VAR: "6"})
    done_before, killed = 0, 0
    for attempt in range(6):
        args = ("resume", run) if (run / "manifest.json").exists() else ("compute", cfg)
        proc = start_cli(*args, "--quiet", log_dir=tmp_path / "logs", env=env)
        if attempt < 5:
            start = done_before
            wait_until(lambda: _done(run) > start, proc)
            time.sleep(rng.uniform(0.0, 0.4))  # the random moment itself, not a wait
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        rc, _out, err = finish(proc)
        assert "Traceback" not in err
        assert rc in ((0, -signal.SIGKILL) if attempt < 5 else (0,)), err
        killed += rc == -signal.SIGKILL  # not one that came as the process finished
        done = _done(run)
        assert done >= done_before, "completed tiles were lost"
        done_before = done
        if rc == 0:
            break
    assert killed >= 1, "every run finished before its kill: nothing was tested"
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], loose_run[1])
    assert verify(run).ok
    assert not [n for n in os.listdir(run / "tiles") if n.endswith(".tmp")]


def _done(run: Path) -> int:
    try:
        return len(TileSet(run / "tiles").keys())
    except Exception:  # a pack renamed or a tile deleted while listed: count again
        return len(TileSet(run / "tiles").keys())


def test_extend_of_a_packed_run_is_bit_identical_to_a_fresh_run(tmp_path, monkeypatch):
    """extend moves and deletes single tiles: the packs that hold them are unpacked
    first; the grown run is the fresh run of the grown data, bit for bit."""
    monkeypatch.setenv(PACK_TILES_VAR, "2")
    x, t = images(20 + 12, 6, 6, 2, seed=1), images(7, 6, 6, 2, seed=2)
    np.savez(tmp_path / "old.npz", x=x[:20])
    np.savez(tmp_path / "new.npz", x=x[20:])
    np.savez(tmp_path / "all.npz", x=x)
    np.savez(tmp_path / "test.npz", x=t)

    def config(name: str, x1: str) -> Path:
        return _with_test(write_config(tmp_path, name, x1=x1, key="x", layers=GAP2_NET, keep_tiles=True,
                                       compute={"block": BLOCK}, run_dir=f"run_{name}"))

    compute(config("old", "old.npz"))
    compute(config("all", "all.npz"))
    run = tmp_path / "run_old"
    assert len(RunStore.open(run).tiles.packs()) >= 10
    extend(run, append=tmp_path / "new.npz")
    assert_bit_identical(read_kernels(run / "kernels.h5")[0],
                         read_kernels(tmp_path / "run_all" / "kernels.h5")[0])
    assert verify(run).ok


def _with_test(cfg: Path) -> Path:
    doc = yaml.safe_load(cfg.read_text())
    doc["data"]["test"] = "test.npz"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


def test_a_fifo_under_a_pack_name_is_named_not_read(tmp_path, loose_run):
    run = copy_run(loose_run, tmp_path / "job")
    fifo = run / "tiles" / "pack-r00000c00000-r00001c00001.pack"
    os.mkfifo(fifo)
    for command in ("status", "verify"):
        out = invoke(command, run)
        assert out.exit_code == 2, (command, out.stdout, out.stderr)
        assert str(fifo) in out.stderr and "Traceback" not in out.stderr
