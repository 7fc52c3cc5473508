"""Kill the real CLI at random moments; resuming must give the uninterrupted result, bit
for bit, and never lose (or rewrite) a completed tile.

Every run here is a real ``kernelcli`` subprocess (one XLA host device per core).
SIGKILL lands at seeded random moments: before anything is written, right after the
manifest, right after the first or second tile, at random times mid-run, and while
the result is being assembled; resumed runs are killed again. Ctrl-C (SIGINT) and
a scheduler's SIGTERM stop with exit 130 / 143 and say how to resume (more signal
moments: test_signals.py).

The runs share a persistent JAX compilation cache (results do not depend on it: the
reference run compiles afresh) to keep the many process starts affordable.

A kill or signal can only be tested while the run is going: where every one was too
late (a fast machine finished first), the test starts over on a larger data set
(``SIZES``), and fails, never skips, when even the largest gives no kill mid-run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers_cli import (
    GAP2_NET,
    assert_bit_identical,
    cli_env,
    finish,
    images,
    read_kernels,
    run_cli,
    start_cli,
    tile_names,
    wait_until,
    write_config,
)

MAX_ATTEMPTS = 12


@dataclass(frozen=True)
class Size:
    """A run's data set (``n`` 8x8x2 images) and tile edge."""

    n: int
    block: int = 8

    @property
    def tiles(self) -> int:
        rows = -(-self.n // self.block)
        return rows * (rows + 1) // 2


# 21 tiles; where every kill came too late, 78 (4x the work), then 300 (16x)
SIZES = (Size(48), Size(96), Size(192))


@pytest.fixture(scope="module")
def data():
    """``data(size)``: the run's images (the same ones for every test of a size)."""
    return lambda size: images(size.n, 8, 8, 2, seed=42)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = tmp_path_factory.mktemp("jax_cache")
    return cli_env(JAX_COMPILATION_CACHE_DIR=cache,
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0,
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0)


def make_run(folder: Path, data, size: Size) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "x.npy", data)
    return write_config(folder, "kill", layers=GAP2_NET, compute={"block": size.block},
                        run_dir="run", run_name="kill", keep_tiles=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data):
    """``reference(size)``: the uninterrupted run (fresh compilation, no cache), made once
    per size."""
    made: dict = {}

    def get(size: Size):
        if size not in made:
            d = tmp_path_factory.mktemp("reference")
            cfg = make_run(d, data(size), size)
            r = run_cli("compute", cfg, "--quiet")
            assert r.returncode == 0, r.stderr
            assert len(tile_names(d / "run")) == size.tiles
            made[size] = read_kernels(d / "run" / "kernels.h5")
        return made[size]
    return get


class TileLedger:
    """Every completed tile seen so far: its inode, mtime and arrays. A tile, once
    complete, must stay exactly that file (never lost, never recomputed)."""

    def __init__(self, run: Path):
        self.run = run
        self.seen: dict[str, tuple] = {}

    def check_and_record(self) -> int:
        names = tile_names(self.run)
        missing = set(self.seen) - names
        assert not missing, f"completed tiles vanished: {sorted(missing)}"
        for name in sorted(names):
            path = self.run / "tiles" / name
            st = path.stat()
            try:
                with h5py.File(path, "r") as f:  # a tile under its final name is whole
                    arrays = {k: f[k][...] for k in f.keys()}
            except OSError as exc:
                raise AssertionError(f"completed tile {name} is unreadable: {exc}") from None
            if name in self.seen:
                ino, mtime, old = self.seen[name]
                assert (st.st_ino, st.st_mtime_ns) == (ino, mtime), f"{name} was rewritten"
                for k in old:
                    assert np.array_equal(arrays[k], old[k]), f"{name} changed"
            else:
                self.seen[name] = (st.st_ino, st.st_mtime_ns, arrays)
        return len(names)


def _trigger(kind, arg, run: Path, start_tiles: int, tiles: int):
    """A predicate that becomes true at the moment to kill."""
    if kind == "delay":
        deadline = time.monotonic() + arg
        return lambda: time.monotonic() >= deadline
    if kind == "manifest":
        return lambda: (run / "manifest.json").exists()
    if kind == "tiles":  # right after `arg` more tiles are complete
        return lambda: len(tile_names(run)) >= start_tiles + arg
    if kind == "mid":    # a random time `arg` after this attempt's first new tile
        state = {}

        def mid():
            now = time.monotonic()
            if "deadline" not in state and len(tile_names(run)) > start_tiles:
                state["deadline"] = now + arg
            return now >= state.get("deadline", float("inf"))
        return mid
    if kind == "writing":  # while a tile is being written (or after 3 more tiles)
        def writing():
            try:
                names = os.listdir(run / "tiles")
            except FileNotFoundError:
                return False
            return (any(n.endswith(".tmp") for n in names)
                    or len(tile_names(run)) >= start_tiles + 3)
        return writing
    if kind == "late":   # with at most one block to go
        return lambda: len(tile_names(run)) >= tiles - 1
    if kind == "assembling":  # every tile written: assembling (or just finished)
        return lambda: len(tile_names(run)) >= tiles
    raise ValueError(kind)


def drive(cfg: Path, run: Path, kills, env, logs: Path, tiles: int, sig=signal.SIGKILL):
    """Start the run, kill it at each moment of ``kills`` (continuing it between kills
    with ``resume``, or ``compute`` again when not even the manifest was written), then
    let it finish. Returns the number of attempts that were actually killed."""
    ledger = TileLedger(run)
    killed = 0
    for attempt, kill in enumerate(list(kills) + [None]):
        assert attempt < MAX_ATTEMPTS
        if (run / "manifest.json").exists():
            args = ("resume", run, "--quiet")
        else:
            if attempt:  # not a run yet: resume says so, and compute starts it afresh
                r = run_cli("resume", run, env=env)
                assert r.returncode == 2, r.stderr
                assert "is not a kernelcli run directory" in r.stderr
            args = ("compute", cfg, "--quiet")
        start_tiles = ledger.check_and_record()
        proc = start_cli(*args, log_dir=logs, env=env)
        if kill is not None:
            wait_until(_trigger(*kill, run, start_tiles, tiles), proc)
            if proc.poll() is None:
                proc.send_signal(sig)
                tmp = [n for n in os.listdir(run / "tiles") if n.endswith(".tmp")] \
                    if (run / "tiles").is_dir() else []
                print(f"{args[0]}: killed at {kill} with {len(tile_names(run))}/{tiles} "
                      f"tiles, manifest: {(run / 'manifest.json').exists()}, writing: {tmp}")
        rc, _out, err = finish(proc)
        assert "Traceback" not in err
        if kill is None or rc == 0:
            assert rc == 0, err
            if kill is None:
                break
        else:
            assert rc == -sig, (rc, err)
            killed += 1  # counted only where it landed, not as the process finished
        ledger.check_and_record()
    # every tile ever completed is still there, untouched; and the run is whole
    assert ledger.check_and_record() == tiles
    leftovers = [p.name for p in list(run.iterdir()) + list((run / "tiles").iterdir())
                 if p.name.endswith(".tmp")]
    assert not leftovers, f"temporary files left behind: {leftovers}"
    return killed


KILL_PLANS = {
    # very early (likely before the manifest), then after the first new tile, then late
    1: lambda rng: [("delay", rng.uniform(0.05, 0.8)), ("tiles", 1), ("late", None)],
    # after every new tile three times over, then while assembling
    2: lambda rng: [("tiles", 1), ("tiles", 1), ("tiles", rng.randint(1, 3)),
                    ("assembling", None)],
    # right after the manifest, while a tile is being written, at random moments mid-run
    3: lambda rng: [("manifest", None), ("writing", None)]
    + [("mid", rng.uniform(0.0, 1.5)) for _ in range(2)],
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(KILL_PLANS))
@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_is_bit_identical(tmp_path, data, env,
                                                                reference, seed):
    for size in SIZES:
        rng = random.Random(seed)
        kills = KILL_PLANS[seed](rng)
        job = tmp_path / f"job{size.n}"
        cfg = make_run(job, data(size), size)
        run = job / "run"
        killed = drive(cfg, run, kills, env, tmp_path / f"logs{size.n}", size.tiles)
        if killed:
            break
        print(f"no kill landed on {size.tiles} tiles: again on a larger data set")
    assert killed >= 1, "no kill landed while the run was going"
    want = reference(size)
    got = read_kernels(run / "kernels.h5")
    assert_bit_identical(got[0], want[0])
    for key in ("config", "kernelcli_version", "data_fingerprint"):
        assert got[1][key] == want[1][key]
    status = json.loads(run_cli("status", run, "--json", env=env).stdout)
    assert status["finished"] is True
    assert status["blocks_done"] == status["blocks_total"] == size.tiles


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_interrupt_stops_with_128_plus_signum_and_says_how_to_resume(tmp_path, data, env,
                                                                     reference, sig):
    """Ctrl-C (or a scheduler's SIGTERM) during compute, and again during resume: each
    time exit 130 (143 for SIGTERM), one line saying how to continue, completed tiles
    kept; then resume completes bit-identically. Where the run finished before the
    signal could stop it, again on a larger data set; never a skip."""
    for size in SIZES:
        stopped = _interrupt_twice(tmp_path / f"job{size.n}", data(size), size, env, sig)
        if stopped is not None:
            break
        print(f"the run of {size.tiles} tiles ended before the signal: again, larger")
    else:
        pytest.fail(f"every run finished before {sig.name} could interrupt it, even on "
                    f"{SIZES[-1].tiles} tiles")
    run, ledger = stopped
    r = run_cli("resume", run, "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    assert ledger.check_and_record() == size.tiles
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], reference(size)[0])


def _interrupt_twice(folder: Path, data, size: Size, env, sig):
    """Interrupt ``compute``, then ``resume``, each after two new tiles; check how each
    stopped. The run directory and its :class:`TileLedger`, or ``None`` where the race
    was lost (a run finished before the signal could stop it)."""
    cfg = make_run(folder, data, size)
    run = folder / "run"
    ledger = TileLedger(run)
    for args in (("compute", cfg), ("resume", run)):
        start = len(tile_names(run))
        proc = start_cli(*args, log_dir=folder / "logs", env=env)
        reached = wait_until(lambda: len(tile_names(run)) >= start + 2, proc)
        if proc.poll() is not None or not reached:
            finish(proc)
            return None
        proc.send_signal(sig)
        rc, _out, err = finish(proc, timeout=120)
        assert rc == 128 + sig, f"{args[0]}: exit status {rc} after {sig.name}; stderr:\n{err}"
        for bad in ("Traceback", "Exception ignored", "terminate called"):
            assert bad not in err, err
        assert sum(ln.startswith("Error:") for ln in err.splitlines()) == 1, err
        last = err.strip().splitlines()[-1]
        assert last == (f"Error: interrupted ({sig.name}); completed tiles are kept: "
                        f"continue with `kernelcli resume {run}`"), err
        assert ledger.check_and_record() >= start + 2
        assert not (run / "kernels.h5").exists()
        status = json.loads(run_cli("status", run, "--json", env=env).stdout)
        assert status["finished"] is False
        assert start + 2 <= status["blocks_done"] < size.tiles
    return run, ledger
