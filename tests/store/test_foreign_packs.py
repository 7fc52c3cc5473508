"""A pack of another run, or a second copy of this run's tiles, in ``tiles/``.

A pack carries the run identity of the run that wrote it. One copied in from another
run directory must never count as this run's tiles: no command acts on its keys (the
packer deleted this run's loose tiles whose keys it named), each refuses it before
anything moves, naming it, and ``verify`` reads every pack, also one whose keys a
pack sorting after it (or a loose copy) serves, so a damaged copy never passes.
Real runs on tiny data, real ``kernelcli`` processes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers_cli import cli_env, images, run_cli, snapshot, write_config

# packs made by hand: the format and its reader are what is tested
from kernelcli.store._packs import PACK, TileSet, read_index

N, BLOCK = 8, 2  # 10 tiles; packs of 4 (2 packs and 2 loose tiles)
FIRST = "pack-r00000c00000-r00000c00000.pack"  # sorts before any pack a run writes


def make_run(folder: Path, seed: int, pack_tiles: int) -> Path:
    """A finished run (tiles kept) of ``N`` images drawn with ``seed``."""
    folder.mkdir()
    np.save(folder / "x.npy", images(N, seed=seed))
    cfg = write_config(folder, "c", compute={"block": BLOCK}, kinds=["nngp"],
                       keep_tiles=True, run_dir="run")
    result = run_cli("compute", cfg, "--quiet", env=cli_env(KERNELCLI_PACK_TILES=pack_tiles))
    assert result.returncode == 0, result.stderr
    return folder / "run"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``(loose, packed, other)``: one run with packing off and with packs of 4, and a
    packed run of other data (another run identity)."""
    d = tmp_path_factory.mktemp("foreign")
    return make_run(d / "loose", 1, 0), make_run(d / "packed", 1, 4), make_run(d / "other", 2, 4)


def packs_of(run: Path) -> list:
    return sorted(n for n in os.listdir(run / "tiles") if PACK.match(n))


def copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run.parent, dest)
    return dest / "run"


def hashes(run: Path) -> dict:
    """sha256 of every file but the lock (a refused command may create it)."""
    return {k: hashlib.sha256(v).hexdigest() for k, v in snapshot(run).items()
            if k != ".kernelcli.lock"}


def refusal(stray: Path) -> str:
    ident = read_index(stray).run
    return (f"Error: {stray} is a tile pack of another run (run identity {ident[:12]}...), "
            f"not of this one: run directories cannot share folders, so nothing was moved "
            f"or deleted; move that tile pack (or the whole tiles/ folder) back to its own "
            f"run directory")


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_a_pack_of_another_run_deletes_nothing_and_is_refused(runs, tmp_path):
    """A run killed with only loose tiles, another run's pack copied in under a name that
    sorts first: every writer refuses it before anything moves, and says so truly."""
    loose, _, other = runs
    run = copy(loose, tmp_path / "a")
    (run / "kernels.h5").unlink()  # every tile done, not assembled: as a kill leaves it
    stray = run / "tiles" / FIRST
    shutil.copyfile(other / "tiles" / packs_of(other)[0], stray)
    assert set(read_index(stray).entries) & {n[:-3] for n in os.listdir(run / "tiles")}
    before = hashes(run)
    for args in (("resume", run), ("assemble", run), ("verify", run)):
        result = run_cli(*args, timeout=120)
        assert result.returncode == 2, (args, result.stderr)
        assert last_line(result) == refusal(stray), args
        assert hashes(run) == before, args  # not one of its tiles deleted
    stray.unlink()
    assert run_cli("resume", run, "--quiet", timeout=120).returncode == 0
    assert run_cli("verify", run, timeout=120).returncode == 0


def test_verify_reads_a_foreign_pack_that_another_pack_shadows(runs, tmp_path):
    """A foreign pack whose keys this run's own pack (sorting after it) also holds."""
    _, packed, other = runs
    run = copy(packed, tmp_path / "a")
    stray = run / "tiles" / FIRST
    shutil.copyfile(other / "tiles" / packs_of(other)[0], stray)
    result = run_cli("verify", run, timeout=120)
    assert result.returncode == 2, result.stderr
    assert last_line(result) == refusal(stray)
    assert run_cli("clean", run, timeout=120).returncode == 2  # as clean says


def test_verify_reads_a_damaged_copy_of_the_runs_own_pack(runs, tmp_path):
    """A second copy of this run's pack, damaged, sorting first (never read otherwise);
    the same with a loose copy of each of its tiles shadowing the only pack."""
    _, packed, _ = runs
    run = copy(packed, tmp_path / "a")
    own = run / "tiles" / packs_of(run)[0]
    stray = run / "tiles" / FIRST
    data = bytearray(own.read_bytes())
    data[-1] ^= 0xFF  # in the last tile's bytes: the index still checks
    stray.write_bytes(bytes(data))
    key = max(read_index(stray).entries)
    result = run_cli("verify", run, timeout=120)
    assert result.returncode == 1, result.stderr
    assert (f"tile {key} in pack {stray} is damaged: its bytes do not match their "
            f"checksum in the pack's index") in result.stderr
    # the only pack, damaged, behind loose copies of its tiles (as a kill between a
    # pack's publication and the deletion of its loose tiles leaves it)
    stray.unlink()
    TileSet(run / "tiles").unpack(read_index(own))
    own.write_bytes(bytes(data))
    result = run_cli("verify", run, timeout=120)
    assert result.returncode == 1, result.stderr
    assert (f"tile {key} in pack {own} is damaged: its bytes do not match their "
            f"checksum in the pack's index") in result.stderr
